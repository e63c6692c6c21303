/* The lazy IR's node class (lazydev/trace/ir.py, Note [Native nodes]): `_lazydev_node.Node`.

   A node is made once per recorded value, about 1.2 per aten op in a training step, so it is
   on the hot path of recording.  As a Python class with __slots__ a node cost 0.8 us to make,
   and every node and its source tuple was tracked by the cyclic GC: the transformer step's
   gen-0 collection scanned about 4000 young objects, most of them nodes and their tuples, for
   0.5 ms.  This type makes a node in C and is not tracked by the GC: nodes form a DAG and hold
   no reference back to anything that holds them, so no cycle can pass through one.  A source
   tuple made only of nodes cannot be in a cycle either, and is untracked at once (CPython
   untracks such tuples itself, but only when a collection first scans them).  That is a rule
   for `arg`: it holds plain data (ints, floats, tuples, dtypes) or objects that never hold a
   node made after them (a CALL node's Macro holds only its constant nodes); a cycle through a
   node would never be freed.

   The key is Python's hash of the same tuple ir.py used to build (Note [IR keys]), so keys are
   unchanged.  Everything that is not on the hot path (the constructor Node(...) with its local
   key, replace, numel, repr) stays in Python and is attached to the type by ir.py. */
#define Py_LIMITED_API 0x030A0000
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#include "wse_record.h"

typedef struct {
  PyObject_HEAD
  PyObject* op;
  PyObject* dtype;
  PyObject* shape;
  PyObject* src;
  PyObject* arg;
  Py_ssize_t key;
} NodeObject;

static PyTypeObject* g_node_type = NULL;
static Py_ssize_t g_live = 0;   /* nodes alive: the leak tests' witness (tests/test_ir.py) */

static void node_dealloc(PyObject* self) {
  NodeObject* n = (NodeObject*)self;
  PyTypeObject* tp = Py_TYPE(self);
  /* A long chain of nodes is freed through their source tuples, whose own dealloc defers
     deep nesting (CPython's trashcan), so this recursion stays shallow. */
  Py_XDECREF(n->op);
  Py_XDECREF(n->dtype);
  Py_XDECREF(n->shape);
  Py_XDECREF(n->src);
  Py_XDECREF(n->arg);
  PyObject_Free(self);
  g_live--;
  Py_DECREF(tp);
}

/* tp_alloc: also what object.__new__(Node) gets, so g_live counts every node. */
static PyObject* node_alloc(PyTypeObject* tp, Py_ssize_t nitems) {
  (void)nitems;
  NodeObject* n = (NodeObject*)PyObject_Malloc(sizeof(NodeObject));
  if (!n) return PyErr_NoMemory();
  memset(n, 0, sizeof(NodeObject));
  PyObject_Init((PyObject*)n, tp);   /* takes a reference to the (heap) type */
  g_live++;
  return (PyObject*)n;
}

static int node_setattro(PyObject* self, PyObject* name, PyObject* value) {
  (void)self; (void)name; (void)value;
  PyErr_SetString(PyExc_AttributeError, "lazydev IR nodes are immutable");
  return -1;
}

/* Untrack a tuple whose items are all nodes or ints: it can never be part of a cycle.  Exact
   tuples only, as CPython's own untracking: a subclass instance has a __dict__. */
static void untrack_atomic_tuple(PyObject* t) {
  if (!PyTuple_CheckExact(t) || !PyObject_GC_IsTracked(t)) return;
  Py_ssize_t n = PyTuple_Size(t);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PyTuple_GetItem(t, i);
    if (Py_TYPE(item) != g_node_type && !PyLong_CheckExact(item)) return;
  }
  PyObject_GC_UnTrack(t);
}

/* hash((local, *[s.key for s in src])) without making the tuple: CPython's tuple hash (the
   xxHash-style loop of Objects/tupleobject.c, 3.8 and later) over the ints' hashes.  The keys
   are then those ir.py computed in Python; nothing depends on that but the tests' comparison
   of the two, since every key is made here. */
#define XXPRIME_1 11400714785074694791ULL
#define XXPRIME_2 14029467366897019727ULL
#define XXPRIME_5 2870177450012600261ULL
#define MODULUS_P ((1ULL << 61) - 1)

static uint64_t int_hash(Py_ssize_t v) {       /* hash(int(v)), Python's modular int hash */
  uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  int64_t h = (int64_t)(a % MODULUS_P);
  if (v < 0) h = -h;
  return (uint64_t)(h == -1 ? -2 : h);
}

static inline uint64_t xx_round(uint64_t acc, uint64_t lane) {
  acc += lane * XXPRIME_2;
  acc = (acc << 31) | (acc >> 33);
  return acc * XXPRIME_1;
}

static Py_ssize_t node_key(PyObject* local, PyObject* src, Py_ssize_t nsrc) {
  Py_ssize_t lv = PyLong_AsSsize_t(local);
  if (lv == -1 && PyErr_Occurred()) return -1;
  uint64_t acc = xx_round(XXPRIME_5, int_hash(lv));
  for (Py_ssize_t i = 0; i < nsrc; i++) {
    PyObject* s = PyTuple_GetItem(src, i);
    if (Py_TYPE(s) != g_node_type) {
      PyErr_Format(PyExc_TypeError, "a node's sources must be nodes, not %R", Py_TYPE(s));
      return -1;
    }
    acc = xx_round(acc, int_hash(((NodeObject*)s)->key));
  }
  acc += (uint64_t)(nsrc + 1) ^ (XXPRIME_5 ^ 3527539ULL);
  return acc == (uint64_t)-1 ? 1546275796 : (Py_ssize_t)acc;
}

/* Node.make(op, dtype, shape, src, arg, local): the node, given its local key. */
static PyObject* node_make(PyObject* unused, PyObject* const* args, Py_ssize_t nargs) {
  (void)unused;
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "Node.make takes (op, dtype, shape, src, arg, local)");
    return NULL;
  }
  PyObject* src = args[3];
  if (!PyTuple_Check(src)) {
    PyErr_SetString(PyExc_TypeError, "a node's sources must be a tuple");
    return NULL;
  }
  Py_ssize_t key = node_key(args[5], src, PyTuple_Size(src));
  if (key == -1 && PyErr_Occurred()) return NULL;
  NodeObject* n = (NodeObject*)node_alloc(g_node_type, 0);
  if (!n) return NULL;
  PyObject* const fields[5] = {args[0], args[1], args[2], src, args[4]};
  PyObject** slots[5] = {&n->op, &n->dtype, &n->shape, &n->src, &n->arg};
  for (int i = 0; i < 5; i++) {
    Py_INCREF(fields[i]);
    *slots[i] = fields[i];
  }
  n->key = key;
  untrack_atomic_tuple(args[2]);
  untrack_atomic_tuple(src);
  return (PyObject*)n;
}

int node_check(PyObject* o) { return Py_TYPE(o) == g_node_type; }

PyObject* node_shape(PyObject* node) {
  if (Py_TYPE(node) != g_node_type) {
    PyErr_Format(PyExc_TypeError, "expected a lazydev IR node, not %R", Py_TYPE(node));
    return NULL;
  }
  return ((NodeObject*)node)->shape;
}

PyObject* node_dtype(PyObject* node) { return ((NodeObject*)node)->dtype; }

PyObject* node_new(PyObject* const fields[6]) { return node_make(NULL, fields, 6); }

static PyObject* node_live(PyObject* self, PyObject* unused) {
  (void)self; (void)unused;
  return PyLong_FromSsize_t(g_live);
}

static PyMemberDef node_members[] = {
    {"op", T_OBJECT_EX, offsetof(NodeObject, op), READONLY, NULL},
    {"dtype", T_OBJECT_EX, offsetof(NodeObject, dtype), READONLY, NULL},
    {"shape", T_OBJECT_EX, offsetof(NodeObject, shape), READONLY, NULL},
    {"src", T_OBJECT_EX, offsetof(NodeObject, src), READONLY, NULL},
    {"arg", T_OBJECT_EX, offsetof(NodeObject, arg), READONLY, NULL},
    {"key", T_PYSSIZET, offsetof(NodeObject, key), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef node_methods[] = {
    {"make", (PyCFunction)(void (*)(void))node_make, METH_FASTCALL | METH_STATIC,
     "make(op, dtype, shape, src, arg, local) -> Node, given its local key (trace/ir.py)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot node_slots[] = {
    {Py_tp_alloc, node_alloc},
    {Py_tp_dealloc, node_dealloc},
    {Py_tp_setattro, node_setattro},
    {Py_tp_members, node_members},
    {Py_tp_methods, node_methods},
    {Py_tp_doc, "One value in the trace. Immutable; `key` is structural (Note [IR keys])."},
    {0, NULL},
};

/* No Py_TPFLAGS_HAVE_GC (see the top), no BASETYPE (a Python subclass would be tracked). */
static PyType_Spec node_spec = {"lazydev.trace.ir.Node", sizeof(NodeObject), 0,
                                Py_TPFLAGS_DEFAULT, node_slots};

static PyMethodDef module_methods[] = {
    {"live", node_live, METH_NOARGS, "live() -> the number of nodes alive"},
    /* The recording hot path (wse_record.c, Note [Native recording] in tensor/replay.py) */
    {"setup_tensors", (PyCFunction)(void (*)(void))record_setup_tensors, METH_FASTCALL,
     "setup_tensors(WseTensor, Storage, strides, fresh, wrapper, device, strided, "
     "value, write, modes, refuse, acquire, release)"},
    {"setup_replay", (PyCFunction)(void (*)(void))record_setup_replay, METH_FASTCALL,
     "setup_replay(plans, part, miss, tensors, NotReplayable, view_miss)"},
    {"signature", (PyCFunction)(void (*)(void))record_signature, METH_FASTCALL,
     "signature(func, args, kwargs, tensors, floats) -> a call's replay key"},
    {"from_node", record_from_node, METH_O, "from_node(node) -> a new wse tensor holding it"},
    {"run_lowered", (PyCFunction)(void (*)(void))record_run_lowered, METH_FASTCALL,
     "run_lowered(func, args, kwargs) -> the op's new wse tensor(s) from its plan, or None"},
    {"setup_dispatch", (PyCFunction)(void (*)(void))record_setup_dispatch, METH_FASTCALL,
     "setup_dispatch(dispatch, failed, handlers, kinds, deferred, state, "
     "is_inference_mode_enabled)"},
    {"run_view", (PyCFunction)(void (*)(void))record_run_view, METH_FASTCALL,
     "run_view(func, args, kwargs, base) -> new views of base from the cached specs, or None"},
    {"replay_elements", (PyCFunction)(void (*)(void))record_replay_elements, METH_FASTCALL,
     "replay_elements(elements, targets, rows) -> a foreach call's new tensors (or [])"},
    {"torch_dispatch", (PyCFunction)(void (*)(void))record_torch_dispatch, METH_FASTCALL,
     "torch_dispatch(cls, func, types, args=(), kwargs=None): WseTensor.__torch_dispatch__"},
    {"set_tensor_maker", record_set_tensor_maker, METH_O,
     "set_tensor_maker(address): the C++ side's wse_make_tensor (0: none)"},
    {"make_tensor", (PyCFunction)(void (*)(void))record_make_tensor, METH_FASTCALL,
     "make_tensor(cls, size, stride, offset, memory_format, dtype, layout, device): "
     "torch.Tensor._make_wrapper_subclass's tensor, positionally"},
    {"tensors_made", record_tensors_made, METH_NOARGS,
     "tensors_made() -> (tensors made by wse_make_tensor, by the wrapper)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef node_module = {PyModuleDef_HEAD_INIT, "_lazydev_node",
                                         "lazydev's IR node type (csrc/wse_node.c)", -1,
                                         module_methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__lazydev_node(void) {
  PyObject* m = PyModule_Create(&node_module);
  if (!m) return NULL;
  g_node_type = (PyTypeObject*)PyType_FromSpec(&node_spec);
  if (!g_node_type || PyModule_AddObject(m, "Node", (PyObject*)g_node_type) < 0) {
    Py_XDECREF(g_node_type);
    g_node_type = NULL;
    Py_DECREF(m);
    return NULL;
  }
  Py_INCREF(g_node_type);   /* the module's reference was stolen; keep our own */
  if (PyModule_AddIntConstant(m, "LOWERED", LOWERED) < 0 ||
      PyModule_AddIntConstant(m, "VIEW", VIEW) < 0 ||
      PyModule_AddIntConstant(m, "REPLAYED", REPLAYED) < 0 ||
      PyModule_AddIntConstant(m, "ALIAS", ALIAS) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
