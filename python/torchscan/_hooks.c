/* The module hooks' fast path: a module call's start and end, each one call into the native
 * library, with no Python object built in the steady state (issue 14: module enter/exit at
 * about an operator's cost).
 *
 * This extension knows nothing of torch. python/torchscan/_labels.py binds it to the two entry
 * points of libtorchscan (their addresses come from torch.ops.torchscan.module_hooks(), with an
 * ABI version) and to a Python function that names a module no session has named yet; the
 * native side keeps, per thread, which sessions label module calls and their module tables
 * (src/registry.rs, src/session/modules.rs). A module's identity is its address: what Python's
 * id() returns, and what Python named it by.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Must equal kModuleHooksAbi in cpp/ops.cpp. */
#define MODULE_HOOKS_ABI 2
/* The most sessions one process holds (src/registry.rs MAX_SESSIONS). */
#define MAX_SESSIONS 64

typedef size_t (*EnterFn)(uint64_t module, int64_t* unnamed, size_t capacity);
typedef int (*EnterInFn)(int64_t session, uint64_t module);
typedef void (*ExitFn)(uint64_t module);
typedef int (*NameFn)(int64_t session, const int64_t* modules, size_t count, const char* labels, size_t length);

static EnterFn enter_fn = NULL;
static EnterInFn enter_in_fn = NULL;
static ExitFn exit_fn = NULL;
static NameFn name_fn = NULL;
/* torch.nn.Module: what a compiled wrapper's `_orig_mod` must be to be followed. */
static PyObject* module_type = NULL;
/* name_unnamed(session, module) -> bool: names `module` (and its submodules) for the session;
 * false when the session passes it over. */
static PyObject* name_unnamed = NULL;
/* escape_name(name) -> str: a name as a path component (torchscan/_names.py), for the rare
 * name that holds a dot, a backslash or a lone surrogate. */
static PyObject* escape_name = NULL;

/* pre(module, args): a forward pre-hook. */
static PyObject* pre(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "pre(module, args): the module is missing");
    return NULL;
  }
  if (enter_fn == NULL) Py_RETURN_NONE;
  int64_t unnamed[MAX_SESSIONS];
  size_t count = enter_fn((uint64_t)(uintptr_t)args[0], unnamed, MAX_SESSIONS);
  if (count > MAX_SESSIONS) count = MAX_SESSIONS;
  /* Rare: the first call of a module that a session labelling every module has not named. */
  for (size_t i = 0; i < count; i++) {
    PyObject* session = PyLong_FromLongLong(unnamed[i]);
    if (session == NULL) return NULL;
    PyObject* result = PyObject_CallFunctionObjArgs(name_unnamed, session, args[0], NULL);
    Py_DECREF(session);
    if (result == NULL) return NULL;
    int named = PyObject_IsTrue(result);
    Py_DECREF(result);
    if (named < 0) return NULL;
    if (named) enter_in_fn(unnamed[i], (uint64_t)(uintptr_t)args[0]);
  }
  Py_RETURN_NONE;
}

/* post(module, ...): a module call ends (the forward hook; also when the forward raised). */
static PyObject* post(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "post(module, args, output): the module is missing");
    return NULL;
  }
  if (exit_fn != NULL) exit_fn((uint64_t)(uintptr_t)args[0]);
  Py_RETURN_NONE;
}

/* ---- naming a module tree (once per measurement and root) ---- */

/* The identities and newline-joined labels of a tree, and the modules by identity (which the
 * caller holds alive while the session may meet them: an identity must not be reused). */
typedef struct {
  int64_t* ids;
  size_t count, capacity;
  char* text;
  size_t length, text_capacity;
  PyObject* named; /* {id: module} */
} Names;

static int grow(void** buffer, size_t* capacity, size_t needed, size_t item) {
  if (needed <= *capacity) return 0;
  size_t wanted = *capacity ? *capacity : 64;
  while (wanted < needed) wanted *= 2;
  void* bigger = PyMem_Realloc(*buffer, wanted * item);
  if (bigger == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  *buffer = bigger;
  *capacity = wanted;
  return 0;
}

/* Appends `module` named `label` (label[0..length]). */
static int add_name(Names* names, PyObject* module, const char* label, size_t length) {
  if (grow((void**)&names->ids, &names->capacity, names->count + 1, sizeof(int64_t)) < 0) return -1;
  if (grow((void**)&names->text, &names->text_capacity, names->length + length + 1, 1) < 0) return -1;
  if (names->count > 0) names->text[names->length++] = '\n';
  memcpy(names->text + names->length, label, length);
  names->length += length;
  names->ids[names->count++] = (int64_t)(uintptr_t)module;
  PyObject* key = PyLong_FromVoidPtr(module);
  if (key == NULL) return -1;
  int failed = PyDict_SetItem(names->named, key, module);
  Py_DECREF(key);
  return failed;
}

/* The module a torch.compile wrapper (OptimizedModule) runs, as a new reference; NULL (no error
 * set) for any other module. */
static PyObject* compiled_original(PyObject* module) {
  const char* type_name = Py_TYPE(module)->tp_name;
  const char* dot = strrchr(type_name, '.');
  if (strcmp(dot ? dot + 1 : type_name, "OptimizedModule") != 0) return NULL;
  PyObject* original = PyObject_GetAttrString(module, "_orig_mod");
  if (original == NULL) {
    PyErr_Clear();
    return NULL;
  }
  int is_module = PyObject_IsInstance(original, module_type);
  if (is_module <= 0) {
    PyErr_Clear();
    Py_DECREF(original);
    return NULL;
  }
  return original;
}

/* Names `module` `path` (a growable buffer holding its label in path[0..length]) and its
 * children, depth first, each child once per parent and by its attribute name, as
 * nn.Module.named_children() yields them. */
static int name_tree(Names* names, PyObject* module, char** path, size_t* path_capacity, size_t length, int depth) {
  if (depth > 1000) {
    PyErr_SetString(PyExc_RecursionError, "torchscan: the module tree is deeper than 1000 levels");
    return -1;
  }
  if (add_name(names, module, *path, length) < 0) return -1;
  PyObject* original = compiled_original(module);
  if (original != NULL) {
    int failed = name_tree(names, original, path, path_capacity, length, depth + 1);
    Py_DECREF(original);
    return failed;
  }
  PyObject* children = PyObject_GetAttrString(module, "_modules");
  if (children == NULL) {
    PyErr_Clear(); /* not laid out as an nn.Module: no children to name */
    return 0;
  }
  if (!PyDict_Check(children) || PyDict_GET_SIZE(children) == 0) {
    Py_DECREF(children);
    return 0;
  }
  PyObject* seen = PySet_New(NULL);
  if (seen == NULL) {
    Py_DECREF(children);
    return -1;
  }
  Py_ssize_t at = 0;
  PyObject *key, *child;
  int failed = 0;
  while (!failed && PyDict_Next(children, &at, &key, &child)) {
    if (child == Py_None || !PyUnicode_Check(key)) continue;
    int duplicate = PySet_Contains(seen, child);
    if (duplicate != 0) {
      failed = duplicate < 0;
      continue;
    }
    if (PySet_Add(seen, child) < 0) {
      failed = 1;
      break;
    }
    Py_ssize_t name_length;
    const char* name = PyUnicode_AsUTF8AndSize(key, &name_length);
    PyObject* escaped = NULL;
    if (name == NULL || memchr(name, '.', (size_t)name_length) || memchr(name, '\\', (size_t)name_length)) {
      PyErr_Clear(); /* a lone surrogate: escaped */
      escaped = PyObject_CallOneArg(escape_name, key);
      name = escaped ? PyUnicode_AsUTF8AndSize(escaped, &name_length) : NULL;
      if (name == NULL) {
        Py_XDECREF(escaped);
        failed = 1;
        break;
      }
    }
    size_t child_length = length + 1 + (size_t)name_length;
    if (grow((void**)path, path_capacity, child_length, 1) < 0) {
      Py_XDECREF(escaped);
      failed = 1;
      break;
    }
    (*path)[length] = '.';
    memcpy(*path + length + 1, name, (size_t)name_length);
    Py_XDECREF(escaped);
    Py_INCREF(child); /* the dict may change while its tree is named */
    failed = name_tree(names, child, path, path_capacity, child_length, depth + 1) < 0;
    Py_DECREF(child);
  }
  Py_DECREF(seen);
  Py_DECREF(children);
  return failed ? -1 : 0;
}

/* name_tree(session, root, label) -> {id: module}: names `root` (labelled `label`) and its
 * submodules in the native session in one call. */
static PyObject* name_root(PyObject* self, PyObject* args) {
  (void)self;
  long long session;
  PyObject* root;
  PyObject* label;
  if (!PyArg_ParseTuple(args, "LOU:name_tree", &session, &root, &label)) return NULL;
  if (name_fn == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "torchscan's module hooks are not bound");
    return NULL;
  }
  Py_ssize_t root_length;
  const char* root_label = PyUnicode_AsUTF8AndSize(label, &root_length);
  if (root_label == NULL) return NULL;
  Names names = {0};
  names.named = PyDict_New();
  char* path = NULL;
  size_t path_capacity = 0;
  int failed = names.named == NULL || grow((void**)&path, &path_capacity, (size_t)root_length, 1) < 0;
  if (!failed) {
    memcpy(path, root_label, (size_t)root_length);
    failed = name_tree(&names, root, &path, &path_capacity, (size_t)root_length, 0) < 0;
  }
  if (!failed && !name_fn(session, names.ids, names.count, names.text, names.length)) {
    PyErr_Format(PyExc_RuntimeError, "torchscan: naming the modules of session %lld failed (is it open?)", session);
    failed = 1;
  }
  PyMem_Free(path);
  PyMem_Free(names.ids);
  PyMem_Free(names.text);
  if (failed) {
    Py_XDECREF(names.named);
    return NULL;
  }
  return names.named;
}

/* bind(table, name_unnamed, module_type): table is torch.ops.torchscan.module_hooks(). */
static PyObject* bind(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* table;
  PyObject* callback;
  PyObject* base;
  PyObject* escape;
  if (!PyArg_ParseTuple(args, "O!OO!O:bind", &PyList_Type, &table, &callback, &PyType_Type, &base, &escape))
    return NULL;
  if (!PyCallable_Check(callback) || !PyCallable_Check(escape)) {
    PyErr_SetString(PyExc_TypeError, "bind: name_unnamed and escape_name must be callable");
    return NULL;
  }
  if (PyList_GET_SIZE(table) != 5) {
    PyErr_Format(PyExc_ImportError, "torchscan's module hooks: the native table has %zd entries, expected 5",
                 PyList_GET_SIZE(table));
    return NULL;
  }
  long long abi = PyLong_AsLongLong(PyList_GET_ITEM(table, 0));
  if (abi == -1 && PyErr_Occurred()) return NULL;
  if (abi != MODULE_HOOKS_ABI) {
    PyErr_Format(PyExc_ImportError,
                 "torchscan's module hooks (ABI %d) do not match its native library (ABI %lld): "
                 "reinstall torchscan",
                 MODULE_HOOKS_ABI, abi);
    return NULL;
  }
  void* enter = PyLong_AsVoidPtr(PyList_GET_ITEM(table, 1));
  void* enter_in = PyLong_AsVoidPtr(PyList_GET_ITEM(table, 2));
  void* exit = PyLong_AsVoidPtr(PyList_GET_ITEM(table, 3));
  void* name = PyLong_AsVoidPtr(PyList_GET_ITEM(table, 4));
  if (PyErr_Occurred()) return NULL;
  if (enter == NULL || enter_in == NULL || exit == NULL || name == NULL) {
    PyErr_SetString(PyExc_ImportError, "torchscan's module hooks: the native table has a null entry");
    return NULL;
  }
  Py_INCREF(callback);
  Py_XSETREF(name_unnamed, callback);
  Py_INCREF(base);
  Py_XSETREF(module_type, base);
  Py_INCREF(escape);
  Py_XSETREF(escape_name, escape);
  enter_fn = (EnterFn)enter;
  enter_in_fn = (EnterInFn)enter_in;
  exit_fn = (ExitFn)exit;
  name_fn = (NameFn)name;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pre", (PyCFunction)(void (*)(void))pre, METH_FASTCALL, "pre(module, args): a module call starts."},
    {"post", (PyCFunction)(void (*)(void))post, METH_FASTCALL, "post(module, *rest): a module call ends."},
    {"name_tree", name_root, METH_VARARGS,
     "name_tree(session, root, label) -> {id: module}: names a module tree in the session."},
    {"bind", bind, METH_VARARGS,
     "bind(table, name_unnamed, module_type, escape_name): binds the hooks to the native library."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchscan._hooks", "torchscan's native module hooks.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hooks(void) {
  return PyModule_Create(&module);
}
