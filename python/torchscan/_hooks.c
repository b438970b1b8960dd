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

/* Labelling by frames reads CPython's interpreter frames, whose layout is private to each
 * minor version: built for the version it was tested on; other versions label by hooks. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define TORCHSCAN_FRAMES 1
#ifndef Py_BUILD_CORE
#define Py_BUILD_CORE 1
#endif
#include "internal/pycore_frame.h"
#else
#define TORCHSCAN_FRAMES 0
#endif

/* Must equal kModuleHooksAbi in cpp/ops.cpp. */
#define MODULE_HOOKS_ABI 3
/* The most sessions one process holds (src/registry.rs MAX_SESSIONS). */
#define MAX_SESSIONS 64

typedef size_t (*EnterFn)(uint64_t module, int64_t* unnamed, size_t capacity);
typedef int (*EnterInFn)(int64_t session, uint64_t module);
typedef void (*ExitFn)(uint64_t module);
typedef int (*NameFn)(int64_t session, const int64_t* modules, size_t count, const char* labels, size_t length);
typedef int (*LabelByFramesFn)(int64_t session, uint64_t owner);
typedef size_t (*WalkFn)(uint64_t owner, uint64_t* out, size_t capacity);
typedef int (*NameUnnamedFn)(int64_t session, uint64_t module, int inside);
typedef void (*RegisterFramesFn)(void* walk, void* name);

static EnterFn enter_fn = NULL;
static EnterInFn enter_in_fn = NULL;
static ExitFn exit_fn = NULL;
static NameFn name_fn = NULL;
static LabelByFramesFn label_by_frames_fn = NULL;
/* torch.nn.Module: what a compiled wrapper's `_orig_mod` must be to be followed. */
static PyObject* module_type = NULL;
/* name_unnamed(session, module, inside=None) -> bool: names `module` (and its submodules) for
 * the session; false when the session passes it over. `inside`: whether a call the session labels
 * is open around it (given when labelling by frames). */
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

/* ---- labelling by frames (src/host_frames.rs) ---- */

/* nn.Module._call_impl's code: each frame running it is a module call (`self`, its first
 * local, is the module; a cell, as its closures capture it). */
static PyObject* call_impl_code = NULL;

#if TORCHSCAN_FRAMES
/* The module calls open on `tstate`, innermost first, in out[0..capacity]; how many there are. */
static size_t open_calls(PyThreadState* tstate, uint64_t* out, size_t capacity) {
  if (tstate == NULL || tstate->cframe == NULL || call_impl_code == NULL) return 0;
  size_t count = 0;
  for (_PyInterpreterFrame* frame = tstate->cframe->current_frame; frame != NULL; frame = frame->previous) {
    if ((PyObject*)frame->f_code != call_impl_code || _PyFrame_IsIncomplete(frame)) continue;
    PyObject* module = frame->localsplus[0];
    if (module != NULL && Py_IS_TYPE(module, &PyCell_Type)) module = PyCell_GET(module);
    if (module == NULL) continue;
    if (count < capacity) out[count] = (uint64_t)(uintptr_t)module;
    count++;
  }
  return count;
}

/* The walker (WalkFn): called by the core on the operator's thread, which usually released the
 * GIL. It reads only its own thread's frames, which cannot change while it runs this code: no
 * reference is taken and no Python object touched but for reading pointers. */
static size_t walk_frames(uint64_t owner, uint64_t* out, size_t capacity) {
  PyThreadState* tstate = PyGILState_GetThisThreadState();
  if (tstate == NULL || (uint64_t)(uintptr_t)tstate != owner) return 0;
  return open_calls(tstate, out, capacity);
}

/* The namer (NameUnnamedFn): takes the GIL (the thread released it to run the operator) and asks
 * Python's name_unnamed; an error there is reported as unraisable and the module passed over. */
static int name_from_frames(int64_t session, uint64_t module, int inside) {
  if (!Py_IsInitialized() || _Py_IsFinalizing() || name_unnamed == NULL) return 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  int named = 0;
  PyObject* handle = PyLong_FromLongLong(session);
  PyObject* result = NULL;
  if (handle != NULL) {
    result = PyObject_CallFunctionObjArgs(name_unnamed, handle, (PyObject*)(uintptr_t)module,
                                          inside ? Py_True : Py_False, NULL);
    Py_DECREF(handle);
  }
  if (result != NULL) {
    named = PyObject_IsTrue(result) == 1;
    Py_DECREF(result);
  }
  if (PyErr_Occurred()) {
    /* Nothing can raise through the operator: an interrupt is raised again at the workload's
     * next line (as the signal would have been), anything else is reported. */
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
      PyErr_Clear();
      PyErr_SetInterrupt();
    } else {
      PyErr_WriteUnraisable(name_unnamed);
    }
  }
  PyErr_Restore(type, value, traceback);
  PyGILState_Release(gil);
  return named;
}
#endif

/* frames_supported() -> bool: whether this build labels by frames. */
static PyObject* frames_supported(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(TORCHSCAN_FRAMES && label_by_frames_fn != NULL && call_impl_code != NULL);
}

/* open_modules() -> [id]: the module calls open on this thread, innermost first. */
static PyObject* open_modules(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  PyObject* ids = PyList_New(0);
#if TORCHSCAN_FRAMES
  if (ids == NULL) return NULL;
  PyThreadState* tstate = PyThreadState_Get();
  size_t count = open_calls(tstate, NULL, 0);
  uint64_t* found = PyMem_Malloc((count ? count : 1) * sizeof(uint64_t));
  if (found == NULL) {
    Py_DECREF(ids);
    return PyErr_NoMemory();
  }
  count = open_calls(tstate, found, count);
  for (size_t i = 0; i < count; i++) {
    PyObject* id = PyLong_FromUnsignedLongLong(found[i]);
    if (id == NULL || PyList_Append(ids, id) < 0) {
      Py_XDECREF(id);
      Py_DECREF(ids);
      PyMem_Free(found);
      return NULL;
    }
    Py_DECREF(id);
  }
  PyMem_Free(found);
#endif
  return ids;
}

/* label_by_frames(session) -> bool: the session labels this thread's work by its frames from now
 * on (no module hooks); False when it cannot. */
static PyObject* label_by_frames(PyObject* self, PyObject* arg) {
  (void)self;
  long long session = PyLong_AsLongLong(arg);
  if (session == -1 && PyErr_Occurred()) return NULL;
  if (!TORCHSCAN_FRAMES || label_by_frames_fn == NULL) Py_RETURN_FALSE;
  int result = label_by_frames_fn(session, (uint64_t)(uintptr_t)PyThreadState_Get());
  if (result < 0) {
    PyErr_Format(PyExc_RuntimeError, "torchscan: session %lld is not open", session);
    return NULL;
  }
  return PyBool_FromLong(result);
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

/* bind(table, name_unnamed, module_type, escape_name, call_impl_code): table is
 * torch.ops.torchscan.module_hooks(). */
static PyObject* bind(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* table;
  PyObject* callback;
  PyObject* base;
  PyObject* escape;
  PyObject* code;
  if (!PyArg_ParseTuple(args, "O!OO!OO!:bind", &PyList_Type, &table, &callback, &PyType_Type, &base, &escape,
                        &PyCode_Type, &code))
    return NULL;
  if (!PyCallable_Check(callback) || !PyCallable_Check(escape)) {
    PyErr_SetString(PyExc_TypeError, "bind: name_unnamed and escape_name must be callable");
    return NULL;
  }
  if (PyList_GET_SIZE(table) != 7) {
    PyErr_Format(PyExc_ImportError, "torchscan's module hooks: the native table has %zd entries, expected 7",
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
  void* by_frames = PyLong_AsVoidPtr(PyList_GET_ITEM(table, 5));
  void* register_frames = PyLong_AsVoidPtr(PyList_GET_ITEM(table, 6));
  if (PyErr_Occurred()) return NULL;
  if (enter == NULL || enter_in == NULL || exit == NULL || name == NULL || by_frames == NULL ||
      register_frames == NULL) {
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
  Py_INCREF(code);
  Py_XSETREF(call_impl_code, code);
  label_by_frames_fn = (LabelByFramesFn)by_frames;
#if TORCHSCAN_FRAMES
  ((RegisterFramesFn)register_frames)((void*)walk_frames, (void*)name_from_frames);
#else
  (void)register_frames;
#endif
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pre", (PyCFunction)(void (*)(void))pre, METH_FASTCALL, "pre(module, args): a module call starts."},
    {"post", (PyCFunction)(void (*)(void))post, METH_FASTCALL, "post(module, *rest): a module call ends."},
    {"name_tree", name_root, METH_VARARGS,
     "name_tree(session, root, label) -> {id: module}: names a module tree in the session."},
    {"bind", bind, METH_VARARGS,
     "bind(table, name_unnamed, module_type, escape_name, call_impl_code): binds the hooks to the native "
     "library."},
    {"frames_supported", frames_supported, METH_NOARGS,
     "frames_supported() -> bool: whether this build labels module calls by frames."},
    {"open_modules", open_modules, METH_NOARGS,
     "open_modules() -> [id]: the module calls open on this thread, innermost first."},
    {"label_by_frames", label_by_frames, METH_O,
     "label_by_frames(session) -> bool: the session labels this thread's work by its frames."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchscan._hooks", "torchscan's native module hooks.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__hooks(void) {
  return PyModule_Create(&module);
}
