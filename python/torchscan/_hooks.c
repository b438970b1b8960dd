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

/* Must equal kModuleHooksAbi in cpp/ops.cpp. */
#define MODULE_HOOKS_ABI 1
/* The most sessions one process holds (src/registry.rs MAX_SESSIONS). */
#define MAX_SESSIONS 64

typedef size_t (*EnterFn)(uint64_t module, int64_t* unnamed, size_t capacity);
typedef int (*EnterInFn)(int64_t session, uint64_t module);
typedef void (*ExitFn)(uint64_t module);

static EnterFn enter_fn = NULL;
static EnterInFn enter_in_fn = NULL;
static ExitFn exit_fn = NULL;
/* name_unnamed(session, module) -> bool: names `module` (and its submodules) for the session;
 * false when the session passes it over. */
static PyObject* name_unnamed = NULL;

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

/* post(module, args, output): a forward hook (PyTorch also calls it when the forward raised). */
static PyObject* post(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "post(module, args, output): the module is missing");
    return NULL;
  }
  if (exit_fn != NULL) exit_fn((uint64_t)(uintptr_t)args[0]);
  Py_RETURN_NONE;
}

/* bind(table, name_unnamed): table is torch.ops.torchscan.module_hooks(). */
static PyObject* bind(PyObject* self, PyObject* args) {
  (void)self;
  PyObject* table;
  PyObject* callback;
  if (!PyArg_ParseTuple(args, "O!O:bind", &PyList_Type, &table, &callback)) return NULL;
  if (!PyCallable_Check(callback)) {
    PyErr_SetString(PyExc_TypeError, "bind: name_unnamed must be callable");
    return NULL;
  }
  if (PyList_GET_SIZE(table) != 4) {
    PyErr_Format(PyExc_ImportError, "torchscan's module hooks: the native table has %zd entries, expected 4",
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
  if (PyErr_Occurred()) return NULL;
  if (enter == NULL || enter_in == NULL || exit == NULL) {
    PyErr_SetString(PyExc_ImportError, "torchscan's module hooks: the native table has a null entry");
    return NULL;
  }
  Py_INCREF(callback);
  Py_XSETREF(name_unnamed, callback);
  enter_fn = (EnterFn)enter;
  enter_in_fn = (EnterInFn)enter_in;
  exit_fn = (ExitFn)exit;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"pre", (PyCFunction)(void (*)(void))pre, METH_FASTCALL, "pre(module, args): a module call starts."},
    {"post", (PyCFunction)(void (*)(void))post, METH_FASTCALL, "post(module, args, output): a module call ends."},
    {"bind", bind, METH_VARARGS, "bind(table, name_unnamed): binds the hooks to the native library."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchscan._hooks", "torchscan's native module hooks.", -1, methods,
};

PyMODINIT_FUNC PyInit__hooks(void) {
  return PyModule_Create(&module);
}
