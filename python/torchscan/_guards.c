/* Acquisitions that an interrupt cannot leak (issue 16).
 *
 * A KeyboardInterrupt (or any asynchronous exception) can land between any two bytecodes of
 * Python code: after a native call returned a handle but before the handle was stored, between
 * two lines of a `finally`, or on the line of a `with` statement after its body, where the
 * interpreter then skips `__exit__`. So every resource torchscan takes (a native session, the
 * profiler slot of a memory measurement, the global module hooks, a model's lock, a model's
 * training flags) is taken and given back here, in C, where no Python line runs in between:
 *
 *   Guard(acquire, release, *args)  calls acquire(*args) and owns its result from that instant;
 *                                   release(result) gives it back, once: on .release(), on
 *                                   __exit__, or when the guard is freed (an interrupt that
 *                                   skipped both frees it with its frame).
 *   hold(lock)                      a Guard that holds `lock` (acquire() and release()).
 *   Group(namespace, entries)       tuples of members kept in a module's globals, with entries
 *                                   put in dicts while any member exists (the global module
 *                                   hooks): add(name, obj) and remove(token) each change both
 *                                   in one step.
 *
 * acquire and release must themselves be C functions (torch operators' `_op`, a lock's
 * methods, a Group's methods) for the step to have no Python line in it.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* ---- Guard ---- */

typedef struct {
  PyObject_HEAD PyObject* release; /* NULL once released */
  PyObject* value;
  int call_with_value; /* release(value), or release() for a lock */
} Guard;

static PyTypeObject GuardType;

/* Gives the resource back; returns release's result (a new reference), None if it was given
 * back already, NULL with an error set if release raised. */
static PyObject* give_back(Guard* guard) {
  PyObject* release = guard->release;
  if (release == NULL) Py_RETURN_NONE;
  guard->release = NULL; /* once, even if release raises */
  PyObject* result = guard->call_with_value ? PyObject_CallOneArg(release, guard->value) : PyObject_CallNoArgs(release);
  Py_DECREF(release);
  return result;
}

static PyObject* guard_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "Guard(acquire, release, *args) takes no keyword arguments");
    return NULL;
  }
  if (PyTuple_GET_SIZE(args) < 2) {
    PyErr_SetString(PyExc_TypeError, "Guard(acquire, release, *args): acquire and release are missing");
    return NULL;
  }
  PyObject* acquire = PyTuple_GET_ITEM(args, 0);
  PyObject* release = PyTuple_GET_ITEM(args, 1);
  if (!PyCallable_Check(acquire) || !PyCallable_Check(release)) {
    PyErr_SetString(PyExc_TypeError, "Guard(acquire, release, *args): acquire and release must be callable");
    return NULL;
  }
  Guard* guard = (Guard*)type->tp_alloc(type, 0);
  if (guard == NULL) return NULL;
  PyObject* rest = PyTuple_GetSlice(args, 2, PyTuple_GET_SIZE(args));
  if (rest == NULL) {
    Py_DECREF(guard);
    return NULL;
  }
  PyObject* value = PyObject_Call(acquire, rest, NULL);
  Py_DECREF(rest);
  if (value == NULL) {
    Py_DECREF(guard); /* nothing was acquired */
    return NULL;
  }
  guard->value = value;
  guard->release = Py_NewRef(release);
  guard->call_with_value = 1;
  return (PyObject*)guard;
}

static void guard_finalize(PyObject* self) {
  Guard* guard = (Guard*)self;
  if (guard->release == NULL) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyObject* result = give_back(guard);
  if (result == NULL) {
    PyErr_WriteUnraisable(self);
  } else {
    Py_DECREF(result);
  }
  PyErr_Restore(type, value, traceback);
}

static int guard_traverse(PyObject* self, visitproc visit, void* arg) {
  Guard* guard = (Guard*)self;
  Py_VISIT(guard->release);
  Py_VISIT(guard->value);
  return 0;
}

static int guard_clear(PyObject* self) {
  Guard* guard = (Guard*)self;
  Py_CLEAR(guard->release);
  Py_CLEAR(guard->value);
  return 0;
}

static void guard_dealloc(PyObject* self) {
  if (PyObject_CallFinalizerFromDealloc(self) < 0) return; /* resurrected */
  PyObject_GC_UnTrack(self);
  guard_clear(self);
  Py_TYPE(self)->tp_free(self);
}

static PyObject* guard_release(PyObject* self, PyObject* unused) {
  (void)unused;
  return give_back((Guard*)self);
}

static PyObject* guard_detach(PyObject* self, PyObject* unused) {
  (void)unused;
  Guard* guard = (Guard*)self;
  Py_CLEAR(guard->release);
  return Py_NewRef(guard->value ? guard->value : Py_None);
}

static PyObject* guard_enter(PyObject* self, PyObject* unused) {
  (void)unused;
  Guard* guard = (Guard*)self;
  return Py_NewRef(guard->value ? guard->value : Py_None);
}

static PyObject* guard_exit(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)args;
  (void)nargs;
  PyObject* result = give_back((Guard*)self);
  if (result == NULL) return NULL;
  Py_DECREF(result);
  Py_RETURN_FALSE; /* the block's exception, if any, propagates */
}

static PyObject* guard_get_value(PyObject* self, void* closure) {
  (void)closure;
  Guard* guard = (Guard*)self;
  return Py_NewRef(guard->value ? guard->value : Py_None);
}

static PyObject* guard_get_held(PyObject* self, void* closure) {
  (void)closure;
  return PyBool_FromLong(((Guard*)self)->release != NULL);
}

static PyMethodDef guard_methods[] = {
    {"release", guard_release, METH_NOARGS, "Gives the resource back (once); returns what release returned."},
    {"detach", guard_detach, METH_NOARGS, "Stops owning the resource (given back elsewhere); returns it."},
    {"__enter__", guard_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))guard_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef guard_getset[] = {
    {"value", guard_get_value, NULL, "What acquire returned.", NULL},
    {"held", guard_get_held, NULL, "Whether the resource is still owned.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject GuardType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchscan._guards.Guard",
    .tp_basicsize = sizeof(Guard),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Guard(acquire, release, *args): owns acquire(*args) until release(value) gives it back.",
    .tp_new = guard_new,
    .tp_dealloc = guard_dealloc,
    .tp_finalize = guard_finalize,
    .tp_traverse = guard_traverse,
    .tp_clear = guard_clear,
    .tp_methods = guard_methods,
    .tp_getset = guard_getset,
};

/* hold(lock) -> Guard: acquires the lock (blocking), releases it once. */
static PyObject* hold(PyObject* self, PyObject* lock) {
  (void)self;
  PyObject* acquire = PyObject_GetAttrString(lock, "acquire");
  if (acquire == NULL) return NULL;
  PyObject* release = PyObject_GetAttrString(lock, "release");
  if (release == NULL) {
    Py_DECREF(acquire);
    return NULL;
  }
  PyObject* args = PyTuple_Pack(2, acquire, release);
  Py_DECREF(acquire);
  Py_DECREF(release);
  if (args == NULL) return NULL;
  PyObject* guard = guard_new(&GuardType, args, NULL);
  Py_DECREF(args);
  if (guard != NULL) ((Guard*)guard)->call_with_value = 0;
  return guard;
}

/* ---- Group ---- */

typedef struct {
  PyObject_HEAD PyObject* namespace; /* a module's globals: name -> tuple of members */
  PyObject* names;                   /* the member tuples' names */
  PyObject* entries;                 /* [(dict, key, value)]: present while any member exists */
} Group;

static int group_empty(Group* group) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(group->names); i++) {
    PyObject* members = PyDict_GetItemWithError(group->namespace, PyTuple_GET_ITEM(group->names, i));
    if (members == NULL) {
      if (PyErr_Occurred()) return -1;
      continue;
    }
    if (!PyTuple_Check(members) || PyTuple_GET_SIZE(members) != 0) return 0;
  }
  return 1;
}

/* Puts the entries in (install) or takes them out; -1 with an error set. */
static int group_entries(Group* group, int install) {
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(group->entries); i++) {
    PyObject* entry = PyList_GET_ITEM(group->entries, i);
    PyObject* dict = PyTuple_GET_ITEM(entry, 0);
    PyObject* key = PyTuple_GET_ITEM(entry, 1);
    /* The item protocol, not PyDict_*: the hook dicts are OrderedDicts, whose order (what
     * PyTorch iterates) PyDict_SetItem would bypass. Both are C, and run no Python code. */
    if (install) {
      if (PyObject_SetItem(dict, key, PyTuple_GET_ITEM(entry, 2)) < 0) return -1;
    } else if (PySequence_Contains(dict, key) == 1 && PyObject_DelItem(dict, key) < 0) {
      return -1;
    }
  }
  return 0;
}

static PyObject* group_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *namespace, *names, *entries;
  static char* keywords[] = {"namespace", "names", "entries", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O!:Group", keywords, &PyDict_Type, &namespace, &PyTuple_Type,
                                   &names, &PyList_Type, &entries))
    return NULL;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
    PyObject* entry = PyList_GET_ITEM(entries, i);
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3 || !PyDict_Check(PyTuple_GET_ITEM(entry, 0))) {
      PyErr_SetString(PyExc_TypeError, "Group: entries must be (dict, key, value) tuples");
      return NULL;
    }
  }
  Group* group = (Group*)type->tp_alloc(type, 0);
  if (group == NULL) return NULL;
  group->namespace = Py_NewRef(namespace);
  group->names = Py_NewRef(names);
  group->entries = Py_NewRef(entries);
  return (PyObject*)group;
}

static int group_traverse(PyObject* self, visitproc visit, void* arg) {
  Group* group = (Group*)self;
  Py_VISIT(group->namespace);
  Py_VISIT(group->names);
  Py_VISIT(group->entries);
  return 0;
}

static int group_clear(PyObject* self) {
  Group* group = (Group*)self;
  Py_CLEAR(group->namespace);
  Py_CLEAR(group->names);
  Py_CLEAR(group->entries);
  return 0;
}

static void group_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  group_clear(self);
  Py_TYPE(self)->tp_free(self);
}

static PyObject* members_of(Group* group, PyObject* name) {
  PyObject* members = PyDict_GetItemWithError(group->namespace, name);
  if (members == NULL) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "Group: no member tuple named %R", name);
    return NULL;
  }
  if (!PyTuple_Check(members)) {
    PyErr_Format(PyExc_TypeError, "Group: %R is not a tuple", name);
    return NULL;
  }
  return members; /* borrowed */
}

/* add(name, obj) -> (name, obj): obj joins the tuple `name`; the entries go in with the first. */
static PyObject* group_add(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  Group* group = (Group*)self;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "add(name, obj)");
    return NULL;
  }
  PyObject* members = members_of(group, args[0]);
  if (members == NULL) return NULL;
  int empty = group_empty(group);
  if (empty < 0) return NULL;
  Py_ssize_t size = PyTuple_GET_SIZE(members);
  PyObject* grown = PyTuple_New(size + 1);
  if (grown == NULL) return NULL;
  for (Py_ssize_t i = 0; i < size; i++) PyTuple_SET_ITEM(grown, i, Py_NewRef(PyTuple_GET_ITEM(members, i)));
  PyTuple_SET_ITEM(grown, size, Py_NewRef(args[1]));
  PyObject* token = PyTuple_Pack(2, args[0], args[1]);
  if (token == NULL || (empty && group_entries(group, 1) < 0) || PyDict_SetItem(group->namespace, args[0], grown) < 0) {
    Py_DECREF(grown);
    Py_XDECREF(token);
    if (empty) {
      PyObject *type, *value, *traceback;
      PyErr_Fetch(&type, &value, &traceback);
      if (group_entries(group, 0) < 0) PyErr_Clear();
      PyErr_Restore(type, value, traceback);
    }
    return NULL;
  }
  Py_DECREF(grown);
  return token;
}

/* remove(token): the member leaves its tuple (once); the entries go out with the last. */
static PyObject* group_remove(PyObject* self, PyObject* token) {
  Group* group = (Group*)self;
  if (!PyTuple_Check(token) || PyTuple_GET_SIZE(token) != 2) {
    PyErr_SetString(PyExc_TypeError, "remove(token): a token from add()");
    return NULL;
  }
  PyObject* name = PyTuple_GET_ITEM(token, 0);
  PyObject* member = PyTuple_GET_ITEM(token, 1);
  PyObject* members = members_of(group, name);
  if (members == NULL) return NULL;
  Py_ssize_t size = PyTuple_GET_SIZE(members), at = -1;
  for (Py_ssize_t i = 0; i < size && at < 0; i++) {
    if (PyTuple_GET_ITEM(members, i) == member) at = i;
  }
  if (at >= 0) {
    PyObject* shrunk = PyTuple_New(size - 1);
    if (shrunk == NULL) return NULL;
    for (Py_ssize_t i = 0, j = 0; i < size; i++) {
      if (i != at) PyTuple_SET_ITEM(shrunk, j++, Py_NewRef(PyTuple_GET_ITEM(members, i)));
    }
    int failed = PyDict_SetItem(group->namespace, name, shrunk);
    Py_DECREF(shrunk);
    if (failed < 0) return NULL;
  }
  int empty = group_empty(group);
  if (empty < 0 || (empty && group_entries(group, 0) < 0)) return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef group_methods[] = {
    {"add", (PyCFunction)(void (*)(void))group_add, METH_FASTCALL, "add(name, obj) -> token"},
    {"remove", group_remove, METH_O, "remove(token)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject GroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "torchscan._guards.Group",
    .tp_basicsize = sizeof(Group),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Group(namespace, names, entries): member tuples, with dict entries present while any member exists.",
    .tp_new = group_new,
    .tp_dealloc = group_dealloc,
    .tp_traverse = group_traverse,
    .tp_clear = group_clear,
    .tp_methods = group_methods,
};

/* ---- training flags ---- */

/* flags(modules) -> [(module, training)] */
static PyObject* flags(PyObject* self, PyObject* modules) {
  (void)self;
  PyObject* sequence = PySequence_Fast(modules, "flags(modules): a sequence of modules");
  if (sequence == NULL) return NULL;
  Py_ssize_t size = PySequence_Fast_GET_SIZE(sequence);
  PyObject* saved = PyList_New(size);
  for (Py_ssize_t i = 0; saved != NULL && i < size; i++) {
    PyObject* module = PySequence_Fast_GET_ITEM(sequence, i);
    PyObject* training = PyObject_GetAttrString(module, "training");
    PyObject* pair = training ? PyTuple_Pack(2, module, training) : NULL;
    Py_XDECREF(training);
    if (pair == NULL)
      Py_CLEAR(saved);
    else
      PyList_SET_ITEM(saved, i, pair);
  }
  Py_DECREF(sequence);
  return saved;
}

/* restore_flags(saved): sets each module's `training` back where it differs; every module is
 * visited even if one raises (the first error is raised at the end). */
static PyObject* restore_flags(PyObject* self, PyObject* saved) {
  (void)self;
  if (!PyList_Check(saved)) {
    PyErr_SetString(PyExc_TypeError, "restore_flags(saved): the list flags() returned");
    return NULL;
  }
  PyObject *type = NULL, *value = NULL, *traceback = NULL;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(saved); i++) {
    PyObject* pair = PyList_GET_ITEM(saved, i);
    PyObject* module = PyTuple_GET_ITEM(pair, 0);
    PyObject* flag = PyTuple_GET_ITEM(pair, 1);
    PyObject* now = PyObject_GetAttrString(module, "training");
    int same = now ? PyObject_RichCompareBool(now, flag, Py_EQ) : -1;
    Py_XDECREF(now);
    if (same != 1 && (same < 0 || PyObject_SetAttrString(module, "training", flag) < 0)) {
      if (type == NULL)
        PyErr_Fetch(&type, &value, &traceback);
      else
        PyErr_Clear();
    }
  }
  if (type != NULL) {
    PyErr_Restore(type, value, traceback);
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"hold", hold, METH_O, "hold(lock) -> Guard: the lock, held until the guard gives it back."},
    {"flags", flags, METH_O, "flags(modules) -> [(module, training)]"},
    {"restore_flags", restore_flags, METH_O, "restore_flags(saved): the training flags set back."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "torchscan._guards",
    "Acquisitions an interrupt cannot leak.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__guards(void) {
  if (PyType_Ready(&GuardType) < 0 || PyType_Ready(&GroupType) < 0) return NULL;
  PyObject* m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  if (PyModule_AddObjectRef(m, "Guard", (PyObject*)&GuardType) < 0 ||
      PyModule_AddObjectRef(m, "Group", (PyObject*)&GroupType) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
