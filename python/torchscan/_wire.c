/* compare_reports' input document, encoded at C speed (issue 16: two 100,000-layer reports
 * compared in seconds, not minutes).
 *
 * encode(report) writes, as compact JSON, only the fields a comparison reads: the schema
 * version, the totals, and each layer call's path, call index and metrics, each metric's
 * status, value, known_value, unit, scope and method. It accepts plain Python data only:
 * dicts with str keys, lists, str, int (not bool), finite float and None, in the places the
 * report schema puts them. On anything else (a tuple for a list, a key that is not a string,
 * an infinite float, an object JSON has no word for, an integer beyond 64 bits, text that is
 * not valid Unicode) it returns None, and python/torchscan/compare.py reads the report with
 * its checking walker, which names the problem by its location. The core (src/compare.rs)
 * checks what JSON can carry: missing fields, statuses, the status invariant, duplicates.
 *
 * Unread fields (a layer's inputs, the report's context, extra keys of a metric) are never
 * visited, whatever they hold (cycles included).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
  char* data;
  Py_ssize_t length;
  Py_ssize_t capacity;
} Buffer;

/* 0 on success, -1 with MemoryError set. */
static int reserve(Buffer* b, Py_ssize_t extra) {
  if (b->length + extra <= b->capacity) return 0;
  Py_ssize_t capacity = b->capacity ? b->capacity : 1 << 16;
  while (capacity < b->length + extra) capacity *= 2;
  char* data = PyMem_Realloc(b->data, (size_t)capacity);
  if (!data) {
    PyErr_NoMemory();
    return -1;
  }
  b->data = data;
  b->capacity = capacity;
  return 0;
}

static int put(Buffer* b, const char* text, Py_ssize_t length) {
  if (reserve(b, length) < 0) return -1;
  memcpy(b->data + b->length, text, (size_t)length);
  b->length += length;
  return 0;
}

#define PUT_LITERAL(b, text) put((b), (text), (Py_ssize_t)(sizeof(text) - 1))

/* The result of a field encoder: written, not plain data (the caller returns None), or a
 * Python error (MemoryError) to raise. */
enum { OK = 0, IRREGULAR = 1, FAILED = -1 };

static int put_string(Buffer* b, PyObject* text) {
  if (!PyUnicode_CheckExact(text)) return IRREGULAR;
  Py_ssize_t length;
  const char* utf8 = PyUnicode_AsUTF8AndSize(text, &length);
  if (!utf8) {
    PyErr_Clear(); /* a lone surrogate: the checking walker reports it */
    return IRREGULAR;
  }
  /* At most 6 bytes per input byte (\u00XX), plus the quotes. */
  if (reserve(b, length * 6 + 2) < 0) return FAILED;
  char* out = b->data + b->length;
  *out++ = '"';
  for (Py_ssize_t i = 0; i < length; i++) {
    unsigned char c = (unsigned char)utf8[i];
    if (c == '"' || c == '\\') {
      *out++ = '\\';
      *out++ = (char)c;
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      memcpy(out, "\\u00", 4);
      out[4] = hex[c >> 4];
      out[5] = hex[c & 15];
      out += 6;
    } else {
      *out++ = (char)c;
    }
  }
  *out++ = '"';
  b->length = out - b->data;
  return OK;
}

/* A metric number: None, an int within 64 bits (signed or unsigned), or a finite float. */
static int put_number(Buffer* b, PyObject* value) {
  char text[32];
  if (value == Py_None) return PUT_LITERAL(b, "null") < 0 ? FAILED : OK;
  if (PyLong_CheckExact(value)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow == 0) {
      if (v == -1 && PyErr_Occurred()) return FAILED;
      return put(b, text, snprintf(text, sizeof text, "%lld", v)) < 0 ? FAILED : OK;
    }
    if (overflow < 0) return IRREGULAR;
    unsigned long long u = PyLong_AsUnsignedLongLong(value);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear(); /* beyond 64 bits */
      return IRREGULAR;
    }
    return put(b, text, snprintf(text, sizeof text, "%llu", u)) < 0 ? FAILED : OK;
  }
  if (PyFloat_CheckExact(value)) {
    double v = PyFloat_AS_DOUBLE(value);
    if (!isfinite(v)) return IRREGULAR;
    /* repr(): the shortest text that reads back as the same double, as json.dumps writes. */
    char* repr = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!repr) return FAILED;
    int result = put(b, repr, (Py_ssize_t)strlen(repr)) < 0 ? FAILED : OK;
    PyMem_Free(repr);
    return result;
  }
  return IRREGULAR;
}

/* The read fields, as the str objects they are looked up by (made once, at import). */
enum {
  STATUS,
  VALUE,
  KNOWN_VALUE,
  UNIT,
  SCOPE,
  METHOD,
  PATH,
  CALL_INDEX,
  METRICS,
  SCHEMA_VERSION,
  TOTALS,
  LAYERS,
  KEYS
};
static const char* const kNames[KEYS] = {"status", "value",      "known_value", "unit",           "scope",  "method",
                                         "path",   "call_index", "metrics",     "schema_version", "totals", "layers"};
static PyObject* keys[KEYS];

/* A field of a dict, borrowed; NULL when absent (or on an error, which the caller checks). */
static PyObject* field(PyObject* dict, int key) {
  return PyDict_GetItemWithError(dict, keys[key]);
}

static int put_key(Buffer* b, int key, int first) {
  if (!first && PUT_LITERAL(b, ",") < 0) return -1;
  if (PUT_LITERAL(b, "\"") < 0 || put(b, kNames[key], (Py_ssize_t)strlen(kNames[key])) < 0) return -1;
  return PUT_LITERAL(b, "\":");
}

/* One metric: its read fields that are present (a missing one is the core's to report). */
static int put_metric(Buffer* b, PyObject* metric) {
  if (!PyDict_CheckExact(metric)) return IRREGULAR;
  if (PUT_LITERAL(b, "{") < 0) return FAILED;
  int first = 1;
  for (int key = STATUS; key <= METHOD; key++) {
    PyObject* value = field(metric, key);
    if (!value) {
      if (PyErr_Occurred()) return FAILED;
      continue;
    }
    if (put_key(b, key, first) < 0) return FAILED;
    first = 0;
    int r;
    if (key == STATUS && !PyUnicode_Check(value)) {
      /* Any object but a string is not a status: written as null, which the core rejects. */
      r = PUT_LITERAL(b, "null") < 0 ? FAILED : OK;
    } else if (key == VALUE || key == KNOWN_VALUE) {
      r = put_number(b, value);
    } else {
      r = put_string(b, value); /* a str subclass (a StrEnum) goes to the walker */
    }
    if (r != OK) return r;
  }
  return PUT_LITERAL(b, "}") < 0 ? FAILED : OK;
}

/* A name -> metric mapping (the totals, a layer's metrics). */
static int put_metrics_held(Buffer* b, PyObject* metrics) {
  if (!PyDict_CheckExact(metrics)) return IRREGULAR;
  if (PUT_LITERAL(b, "{") < 0) return FAILED;
  Py_ssize_t position = 0;
  PyObject *name, *metric;
  int first = 1;
  while (PyDict_Next(metrics, &position, &name, &metric)) {
    if (!first && PUT_LITERAL(b, ",") < 0) return FAILED;
    first = 0;
    /* Held while read: a lookup may compare keys with user objects, which may run code. */
    Py_INCREF(metric);
    int r = put_string(b, name);
    if (r == OK) r = PUT_LITERAL(b, ":") < 0 ? FAILED : OK;
    if (r == OK) r = put_metric(b, metric);
    Py_DECREF(metric);
    if (r != OK) return r;
  }
  return PUT_LITERAL(b, "}") < 0 ? FAILED : OK;
}

/* put_metrics_held, with `metrics` (borrowed from its container) held while it is read. */
static int put_metrics(Buffer* b, PyObject* metrics) {
  if (!metrics) return PyErr_Occurred() ? FAILED : IRREGULAR;
  Py_INCREF(metrics);
  int r = put_metrics_held(b, metrics);
  Py_DECREF(metrics);
  return r;
}

static int put_layer(Buffer* b, PyObject* layer) {
  if (!PyDict_CheckExact(layer)) return IRREGULAR;
  PyObject* path = field(layer, PATH);
  PyObject* call_index = path ? field(layer, CALL_INDEX) : NULL;
  if (PyErr_Occurred()) return FAILED;
  if (!path || !call_index || !PyLong_CheckExact(call_index)) return IRREGULAR;
  int overflow = 0;
  long long index = PyLong_AsLongLongAndOverflow(call_index, &overflow);
  if (overflow) return IRREGULAR; /* the walker says "out of range" */
  if (index == -1 && PyErr_Occurred()) return FAILED;
  if (PUT_LITERAL(b, "{\"path\":") < 0) return FAILED;
  int r = put_string(b, path);
  if (r != OK) return r;
  char text[32];
  if (put(b, text, snprintf(text, sizeof text, ",\"call_index\":%lld,\"metrics\":", index)) < 0) return FAILED;
  r = put_metrics(b, field(layer, METRICS));
  if (r != OK) return r;
  return PUT_LITERAL(b, "}") < 0 ? FAILED : OK;
}

static int put_layers(Buffer* b, PyObject* layers) {
  int r;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(layers); i++) {
    if (i && PUT_LITERAL(b, ",") < 0) return FAILED;
    PyObject* layer = PyList_GET_ITEM(layers, i);
    Py_INCREF(layer);
    r = put_layer(b, layer);
    Py_DECREF(layer);
    if (r != OK) return r;
  }
  return OK;
}

static int put_report(Buffer* b, PyObject* report) {
  if (!PyDict_CheckExact(report)) return IRREGULAR;
  PyObject* version = field(report, SCHEMA_VERSION);
  PyObject* layers = version ? field(report, LAYERS) : NULL;
  if (PyErr_Occurred()) return FAILED;
  if (!version || !PyLong_CheckExact(version) || !layers || !PyList_CheckExact(layers)) return IRREGULAR;
  if (PUT_LITERAL(b, "{\"schema_version\":") < 0) return FAILED;
  int r = put_number(b, version);
  if (r != OK) return r;
  if (PUT_LITERAL(b, ",\"totals\":") < 0) return FAILED;
  r = put_metrics(b, field(report, TOTALS));
  if (r != OK) return r;
  if (PUT_LITERAL(b, ",\"layers\":[") < 0) return FAILED;
  Py_INCREF(layers);
  r = put_layers(b, layers);
  Py_DECREF(layers);
  if (r != OK) return r;
  return PUT_LITERAL(b, "]}") < 0 ? FAILED : OK;
}

/* encode(report) -> str | None */
static PyObject* encode(PyObject* self, PyObject* report) {
  (void)self;
  Buffer b = {NULL, 0, 0};
  int r = put_report(&b, report);
  PyObject* result = NULL;
  if (r == OK) {
    result = PyUnicode_DecodeUTF8(b.data, b.length, "strict");
  } else if (r == IRREGULAR) {
    result = Py_NewRef(Py_None);
  }
  PyMem_Free(b.data);
  return result;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_O,
     "encode(report) -> str | None: the fields compare_reports reads, as JSON; None unless plain data."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "torchscan._wire", "compare_reports' input encoder.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__wire(void) {
  for (int key = 0; key < KEYS; key++) {
    keys[key] = PyUnicode_InternFromString(kNames[key]);
    if (!keys[key]) return NULL;
  }
  return PyModule_Create(&module);
}
