/* The recording hot path in C (Note [Native recording] in lazydev/tensor/replay.py).

   WseTensor.__torch_dispatch__ is here, and so is the replay of the calls most of a training
   step is made of: an op whose handler is dispatch.py's lowered_op, view_op or a
   _replayed_first's (the call's signature, its plan's lookup, each tensor argument's node, the
   result's node and its new tensor; a view's new tensors from its cached specs), and a foreach
   call's elements (foreach.py _replay).  In Python that was about ten function calls per op.
   Only the common cases are written out: every other argument kind, a plan of several nodes,
   a tensor whose value is not simply its storage's node, a write that is not to all of a
   storage, a plan miss and every other op call back into the Python that handles them
   (replay.py `_part`, `Plan.run`, `_miss`; wse_tensor.py `value`, `write`; dispatch.py
   `dispatch`), so each rule has one definition, and the keys made here are the keys Python
   made.

   The Python objects it needs (the tensor class, the plan table, the fallbacks) are handed
   over once by `setup_tensors` (wse_tensor.py), `setup_replay` (replay.py) and
   `setup_dispatch` (dispatch.py). */
#define Py_LIMITED_API 0x030A0000
#include <Python.h>

#include "wse_record.h"

/* From wse_tensor.py */
static PyObject* g_tensor_type;   /* WseTensor */
static PyObject* g_storage;       /* Storage: Storage.pending(numel, node) makes one */
static PyObject* g_strides;       /* shape -> row-major strides (wse_tensor._STRIDES) */
static PyObject* g_fresh;         /* WseTensor.fresh(storage, shape): fills g_strides */
static PyObject* g_wrapper;       /* torch.Tensor._make_wrapper_subclass */
static PyObject* g_device;        /* torch.device("wse", 0) */
static PyObject* g_strided;       /* torch.strided */
static PyObject* g_value;         /* wse_tensor.value(t) */
/* The C++ side's wse_make_tensor(cls, size, stride, offset, dtype), once lazydev/__init__.py
   hands it over (Note [Native tensor objects] in csrc/wse_hooks.cpp); g_wrapper until then. */
typedef PyObject* (*make_fn)(PyObject*, PyObject*, PyObject*, PyObject*, PyObject*);
static make_fn g_make;
static long long g_made[2];       /* tensors made by g_make, by g_wrapper (tensors_made()) */
static PyObject* g_write;         /* wse_tensor.write(t, node) */
/* From replay.py */
static PyObject* g_plans;         /* signature -> Plan or None */
static PyObject* g_part;          /* _part(a, tensors, floats): every other argument's part */
static PyObject* g_miss;          /* _miss(key, func, args, kwargs, tensors) -> Plan or None */
static PyObject* g_tensors;       /* _tensors(outputs): several outputs' tensors */
static PyObject* g_not_replayable;  /* replay._NotReplayable */
static PyObject* g_view_miss;     /* _view_miss(key, func, args, kwargs, base, tensors) */
/* From dispatch.py */
static PyObject* g_dispatch;      /* dispatch(func, args, kwargs): every call not taken here */
static PyObject* g_failed;        /* failed(e, func, args, kwargs): a call's error, raised */
static PyObject* g_handlers;      /* id(op) -> its handler (dispatch._HANDLERS) */
static PyObject* g_kinds;         /* handler -> LOWERED, VIEW, REPLAYED, ALIAS, or the key of
                                     its op's checked plans (replay._Checked): ops taken here */
static PyObject* g_deferred;      /* errors raised inside backward, waiting */
static PyObject* g_state;         /* lazydev.trace.state: its _current trace counts ops */
static PyObject* g_inference;     /* torch.is_inference_mode_enabled */
static PyObject* g_modes;         /* torch._C._len_torch_dispatch_stack */
static PyObject* g_refuse;        /* wse_tensor._refuse_graph_tracing(func) */
static PyObject *g_acquire, *g_release;   /* the RECORDING lock's */

/* Interned attribute names. */
static PyObject *s_st, *s_meta, *s_full, *s_cache, *s_node, *s_dtype, *s_one, *s_scalars,
    *s_run, *s_current, *s_nodes, *s_scalar_nodes, *s_numel, *s_set_node, *s_pending,
    *s_is_inference;

static int intern_names(void) {
  const char* names[] = {"_st", "_lz_meta", "_lz_full", "_lz_cache", "node", "dtype", "_one",
                         "_scalars", "run", "_current", "nodes", "scalar_nodes", "numel",
                         "set_node", "pending", "is_inference"};
  PyObject** slots[] = {&s_st, &s_meta, &s_full, &s_cache, &s_node, &s_dtype, &s_one,
                        &s_scalars, &s_run, &s_current, &s_nodes, &s_scalar_nodes, &s_numel,
                        &s_set_node, &s_pending, &s_is_inference};
  for (int i = 0; i < 16; i++) {
    if (!*slots[i] && !(*slots[i] = PyUnicode_InternFromString(names[i]))) return -1;
  }
  return 0;
}

static void keep(PyObject** slot, PyObject* obj) {
  PyObject* old = *slot;
  Py_INCREF(obj);
  *slot = obj;
  Py_XDECREF(old);
}

static PyObject* setup(const char* name, PyObject** const slots[], int n, PyObject* const* args,
                       Py_ssize_t nargs) {
  if (nargs != n) {
    PyErr_Format(PyExc_TypeError, "%s takes %d arguments", name, n);
    return NULL;
  }
  if (intern_names() < 0) return NULL;
  for (int i = 0; i < n; i++) keep(slots[i], args[i]);
  Py_RETURN_NONE;
}

/* setup_tensors(WseTensor, Storage, _STRIDES, WseTensor.fresh, wrapper, device,
   strided, value, write, modes, refuse, acquire, release) */
PyObject* record_setup_tensors(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  PyObject** const slots[] = {&g_tensor_type, &g_storage, &g_strides, &g_fresh, &g_wrapper,
                              &g_device, &g_strided, &g_value, &g_write, &g_modes, &g_refuse,
                              &g_acquire, &g_release};
  return setup("setup_tensors", slots, 13, args, nargs);
}

/* setup_replay(_PLANS, _part, _miss, _tensors, _NotReplayable, _view_miss) */
PyObject* record_setup_replay(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  PyObject** const slots[] = {&g_plans, &g_part, &g_miss, &g_tensors, &g_not_replayable,
                              &g_view_miss};
  return setup("setup_replay", slots, 6, args, nargs);
}

/* setup_dispatch(dispatch, failed, _HANDLERS, kinds, _deferred, state module,
   is_inference_mode_enabled) */
PyObject* record_setup_dispatch(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  PyObject** const slots[] = {&g_dispatch, &g_failed, &g_handlers, &g_kinds, &g_deferred,
                              &g_state, &g_inference};
  return setup("setup_dispatch", slots, 7, args, nargs);
}

/* ---- signatures (replay.signature) ------------------------------------------------------- */

/* A float whose value is part of the signature (0, 1, -1, inf, nan: replay._float_part). */
static int special_float(double v) {
  return v == 0.0 || v == 1.0 || v == -1.0 || v - v != 0.0;
}

/* A tuple or list of exact ints: `(type, tuple(a))`, new reference; NULL without an error if
   it holds anything else. */
static PyObject* int_sequence_part(PyObject* a) {
  PyObject* items = PySequence_Tuple(a);
  if (!items) return NULL;
  Py_ssize_t n = PyTuple_Size(items);
  for (Py_ssize_t i = 0; i < n; i++) {
    if (!PyLong_CheckExact(PyTuple_GetItem(items, i))) {
      Py_DECREF(items);
      return NULL;
    }
  }
  PyObject* part = PyTuple_Pack(2, (PyObject*)Py_TYPE(a), items);
  Py_DECREF(items);
  return part;
}

/* One argument's part of the signature (new reference), collecting tensors and floats. */
static PyObject* part_of(PyObject* a, PyObject* tensors, PyObject* floats) {
  PyObject* t = (PyObject*)Py_TYPE(a);
  if (t == g_tensor_type) {
    if (PyList_Append(tensors, a) < 0) return NULL;
    return PyObject_GetAttr(a, s_meta);
  }
  if (a == Py_None || PyLong_CheckExact(a)) {
    Py_INCREF(a);
    return a;
  }
  if (PyFloat_CheckExact(a) && !special_float(PyFloat_AsDouble(a))) {
    if (PyList_Append(floats, a) < 0) return NULL;
    Py_INCREF(t);
    return t;
  }
  if (PyTuple_CheckExact(a) || PyList_CheckExact(a)) {
    PyObject* part = int_sequence_part(a);
    if (part || PyErr_Occurred()) return part;
  }
  return PyObject_CallFunctionObjArgs(g_part, a, tensors, floats, NULL);
}

/* signature(func, args, kwargs, tensors, floats): the call's key (replay.py, Note [Replay
   plans]); raises _NotReplayable as _part does. */
PyObject* record_signature(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  if (nargs != 5) {
    PyErr_SetString(PyExc_TypeError, "signature takes (func, args, kwargs, tensors, floats)");
    return NULL;
  }
  PyObject *call_args = args[1], *kwargs = args[2], *tensors = args[3], *floats = args[4];
  Py_ssize_t n = PyTuple_Size(call_args);
  if (n < 0) return NULL;
  Py_ssize_t nkw = kwargs == Py_None ? 0 : PyDict_Size(kwargs);
  PyObject* key = nkw < 0 ? NULL : PyTuple_New(1 + n + 2 * nkw);
  if (!key) return NULL;
  PyObject* fid = PyLong_FromVoidPtr(args[0]);   /* id(func) */
  if (!fid || PyTuple_SetItem(key, 0, fid) < 0) goto fail;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* part = part_of(PyTuple_GetItem(call_args, i), tensors, floats);
    if (!part || PyTuple_SetItem(key, 1 + i, part) < 0) goto fail;
  }
  Py_ssize_t pos = 0, at = 1 + n;
  PyObject *k, *v;
  while (nkw && PyDict_Next(kwargs, &pos, &k, &v)) {
    Py_INCREF(k);
    if (PyTuple_SetItem(key, at++, k) < 0) goto fail;
    PyObject* part = part_of(v, tensors, floats);
    if (!part || PyTuple_SetItem(key, at++, part) < 0) goto fail;
  }
  return key;
fail:
  Py_DECREF(key);
  return NULL;
}

/* ---- values and results (wse_tensor.value, from_node) ------------------------------------- */

/* value(t), new reference: its storage's node when t is all of it as it is (the fast case of
   wse_tensor.value), else the Python function. */
static PyObject* value_of(PyObject* t) {
  PyObject *st = PyObject_GetAttr(t, s_st), *node = NULL, *meta = NULL, *full = NULL;
  PyObject* dtype = NULL;
  int fast = 0;
  if (!st) return NULL;
  if (!(node = PyObject_GetAttr(st, s_node))) goto done;
  if (node != Py_None && (full = PyObject_GetAttr(t, s_full)) && full == Py_True &&
      (meta = PyObject_GetAttr(t, s_meta)) && PyTuple_Check(meta) && PyTuple_Size(meta) == 5 &&
      (dtype = PyObject_GetAttr(st, s_dtype)) && dtype == PyTuple_GetItem(meta, 4)) {
    PyObject* shape = PyTuple_GetItem(meta, 0);
    PyObject* nshape = node_shape(node);
    fast = nshape && (nshape == shape || PyObject_RichCompareBool(nshape, shape, Py_EQ) == 1);
  }
done:
  Py_XDECREF(st);
  Py_XDECREF(full);
  Py_XDECREF(meta);
  Py_XDECREF(dtype);
  if (PyErr_Occurred()) {
    Py_XDECREF(node);
    return NULL;
  }
  if (fast) return node;
  Py_XDECREF(node);
  return PyObject_CallFunctionObjArgs(g_value, t, NULL);
}

static PyObject* contiguous_strides(PyObject* shape) {
  PyObject* strides = PyDict_GetItemWithError(g_strides, shape);   /* borrowed */
  Py_XINCREF(strides);
  return strides;
}

/* set_tensor_maker(address): wse_make_tensor's address (0: none, g_wrapper makes them). */
PyObject* record_set_tensor_maker(PyObject* m, PyObject* address) {
  (void)m;
  void* fn = PyLong_AsVoidPtr(address);
  if (!fn && PyErr_Occurred()) return NULL;
  g_make = (make_fn)fn;
  Py_RETURN_NONE;
}

/* A new WseTensor object of this size, stride, offset and dtype (its attributes unset). */
static PyObject* new_tensor(PyObject* size, PyObject* stride, PyObject* offset,
                            PyObject* dtype) {
  if (g_make) {
    PyObject* t = g_make(g_tensor_type, size, stride, offset, dtype);
    if (t) g_made[0]++;
    if (t || PyErr_Occurred()) return t;
  }
  g_made[1]++;
  return PyObject_CallFunctionObjArgs(g_wrapper, g_tensor_type, size, stride, offset, Py_None,
                                      dtype, g_strided, g_device, NULL);
}

/* tensors_made() -> (by wse_make_tensor, by the wrapper): which maker the hot paths use. */
PyObject* record_tensors_made(PyObject* m, PyObject* unused) {
  (void)m; (void)unused;
  return Py_BuildValue("(LL)", g_made[0], g_made[1]);
}

/* make_tensor(cls, size, stride, offset, memory_format, dtype, layout, device): what
   torch.Tensor._make_wrapper_subclass makes, given those positionally; a WseTensor of the wse
   device's strided layout through wse_make_tensor. */
PyObject* record_make_tensor(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  if (nargs == 8 && args[0] == g_tensor_type && args[4] == Py_None && args[6] == g_strided &&
      args[7] == g_device)
    return new_tensor(args[1], args[2], args[3], args[5]);
  g_made[1]++;
  PyObject* pos = PyTuple_New(nargs);
  for (Py_ssize_t i = 0; pos && i < nargs; i++) PyTuple_SetItem(pos, i, Py_NewRef(args[i]));
  PyObject* t = pos ? PyObject_Call(g_wrapper, pos, NULL) : NULL;
  Py_XDECREF(pos);
  return t;
}

/* A new wse tensor over storage `st` (wse_tensor.py WseTensor._view: `meta` is its _lz_meta,
   `full` whether it is all of `st` as it is). */
static PyObject* wrap(PyObject* st, PyObject* size, PyObject* stride, PyObject* offset,
                      PyObject* dtype, PyObject* meta, PyObject* full) {
  PyObject* t = new_tensor(size, stride, offset, dtype);
  if (t && (PyObject_SetAttr(t, s_st, st) < 0 || PyObject_SetAttr(t, s_meta, meta) < 0 ||
            PyObject_SetAttr(t, s_full, full) < 0 || PyObject_SetAttr(t, s_cache, Py_None) < 0))
    Py_CLEAR(t);
  return t;
}

/* from_node(node): a new tensor with its own storage holding `node` (wse_tensor.py). */
PyObject* record_from_node(PyObject* m, PyObject* node) {
  (void)m;
  PyObject* shape = node_shape(node);
  if (!shape) return NULL;
  Py_ssize_t numel = 1, ndim = PyTuple_Size(shape);
  for (Py_ssize_t i = 0; i < ndim; i++) {
    Py_ssize_t d = PyLong_AsSsize_t(PyTuple_GetItem(shape, i));
    if (d == -1 && PyErr_Occurred()) return NULL;
    numel *= d;
  }
  PyObject *count = PyLong_FromSsize_t(numel), *st = NULL, *strides = NULL, *t = NULL;
  PyObject *zero = NULL, *meta = NULL, *dtype = node_dtype(node);
  if (!count || !(st = PyObject_CallMethodObjArgs(g_storage, s_pending, count, node, NULL)))
    goto done;
  if (!(strides = contiguous_strides(shape))) {
    if (!PyErr_Occurred()) t = PyObject_CallFunctionObjArgs(g_fresh, st, shape, NULL);
    goto done;
  }
  if ((zero = PyLong_FromLong(0)) && (meta = PyTuple_Pack(5, shape, strides, zero, count, dtype)))
    t = wrap(st, shape, strides, zero, dtype, meta, Py_True);
done:
  Py_XDECREF(count);
  Py_XDECREF(st);
  Py_XDECREF(strides);
  Py_XDECREF(zero);
  Py_XDECREF(meta);
  return t;
}

/* ---- replaying a plan (replay.run_lowered) ----------------------------------------------- */

/* `inputs` followed by `scalars` (a list), new reference. */
static PyObject* joined(PyObject* inputs, PyObject* scalars) {
  PyObject* all = PyList_GetSlice(inputs, 0, PyList_Size(inputs));
  Py_ssize_t n = all ? PyList_Size(scalars) : 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (PyList_Append(all, PyList_GetItem(scalars, i)) < 0) {
      Py_CLEAR(all);
      break;
    }
  }
  return all;
}

/* The one node of a `_one` plan (op, dtype, shape, get, one, arg, local) on `values` (its inputs
   and runtime scalars): src is (get(values),) if one else get(values). */
static PyObject* make_one(PyObject* one, PyObject* values) {
  PyObject *got = PyObject_CallFunctionObjArgs(PyTuple_GetItem(one, 3), values, NULL), *src;
  if (!got) return NULL;
  src = PyObject_IsTrue(PyTuple_GetItem(one, 4)) ? PyTuple_Pack(1, got) : Py_NewRef(got);
  Py_DECREF(got);
  if (!src) return NULL;
  PyObject* fields[6] = {PyTuple_GetItem(one, 0), PyTuple_GetItem(one, 1),
                         PyTuple_GetItem(one, 2), src, PyTuple_GetItem(one, 5),
                         PyTuple_GetItem(one, 6)};
  PyObject* out = node_new(fields);
  Py_DECREF(src);
  return out;
}

/* Plan.run(inputs, floats, scalars), new reference: the plan's output node(s) on `inputs` (a list
   of value nodes), `scalars` its runtime scalar nodes if already made (NULL: made here from
   `floats`). A one-node plan is made here; any other runs in Python. */
static PyObject* run_plan(PyObject* plan, PyObject* inputs, PyObject* floats,
                          PyObject* scalars) {
  PyObject* one = PyObject_GetAttr(plan, s_one);
  if (!one) return NULL;
  if (one == Py_None || !PyTuple_Check(one) || PyTuple_Size(one) != 7) {
    Py_DECREF(one);
    return PyObject_CallMethodObjArgs(plan, s_run, inputs, floats, scalars ? scalars : Py_None,
                                      NULL);
  }
  PyObject *made = NULL, *values = NULL, *out = NULL;
  if (!scalars) {
    PyObject* specs = PyObject_GetAttr(plan, s_scalars);
    int any = specs ? PyObject_IsTrue(specs) : -1;
    Py_XDECREF(specs);
    if (any > 0) made = PyObject_CallMethodObjArgs(plan, s_scalar_nodes, floats, NULL);
    if (any < 0 || (any > 0 && !made)) goto done;
    scalars = made;
  }
  int has = scalars ? PyObject_IsTrue(scalars) : 0;
  if (has < 0) goto done;
  if (has && !PyList_Check(scalars)) {
    PyErr_SetString(PyExc_TypeError, "a plan's scalar nodes are a list");
    goto done;
  }
  values = has ? joined(inputs, scalars) : Py_NewRef(inputs);
  if (values) out = make_one(one, values);
done:
  Py_DECREF(one);
  Py_XDECREF(made);
  Py_XDECREF(values);
  return out;
}

/* The call's plan (new reference; may be None), or NULL: with an error set if one was raised,
   without one if the call must take the general path (an argument is not replayable, or there
   is no plan and `miss` is NULL). A miss calls `miss(key, func, args, kwargs, [base,] tensors)`,
   which builds (or refuses) the plan once, in Python. */
static PyObject* find_plan(PyObject* const* args, PyObject* tensors, PyObject* floats,
                           PyObject* miss, PyObject* base) {
  PyObject* sig_args[5] = {args[0], args[1], args[2], tensors, floats};
  PyObject* key = record_signature(NULL, sig_args, 5);
  PyObject* plan = key ? PyDict_GetItemWithError(g_plans, key) : NULL;
  if (!plan && PyErr_Occurred()) {   /* not replayable, or an unhashable argument */
    if (PyErr_ExceptionMatches(g_not_replayable) || PyErr_ExceptionMatches(PyExc_TypeError))
      PyErr_Clear();
    Py_XDECREF(key);
    return NULL;
  }
  Py_XINCREF(plan);
  if (!plan && miss) {
    plan = base ? PyObject_CallFunctionObjArgs(miss, key, args[0], args[1], args[2], base,
                                               tensors, NULL)
                : PyObject_CallFunctionObjArgs(miss, key, args[0], args[1], args[2], tensors,
                                               NULL);
  }
  Py_DECREF(key);
  return plan;
}

/* [value(t) for t in tensors] (a list), new reference. */
static PyObject* values_of(PyObject* tensors) {
  Py_ssize_t n = PyList_Size(tensors);
  PyObject* values = n >= 0 ? PyList_New(n) : NULL;
  for (Py_ssize_t i = 0; values && i < n; i++) {
    PyObject* v = value_of(PyList_GetItem(tensors, i));
    if (!v || PyList_SetItem(values, i, v) < 0) Py_CLEAR(values);
  }
  return values;
}

/* The new tensor(s) holding a plan's output node(s) `out`: from_node, or replay._tensors for
   several. */
static PyObject* tensors_of(PyObject* out) {
  return node_check(out) ? record_from_node(NULL, out)
                         : PyObject_CallFunctionObjArgs(g_tensors, out, NULL);
}

/* A functional op through its plan (`miss` builds a new one; NULL: none is built): its new
   wse tensor(s), or None (the general path). */
static PyObject* lowered(PyObject* const* args, PyObject* miss) {
  PyObject *tensors = PyList_New(0), *floats = PyList_New(0), *inputs = NULL, *out = NULL;
  PyObject* result = NULL;
  PyObject* plan = tensors && floats ? find_plan(args, tensors, floats, miss, NULL) : NULL;
  if (!plan || plan == Py_None) {
    if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
    goto done;
  }
  if ((inputs = values_of(tensors)) && (out = run_plan(plan, inputs, floats, NULL)))
    result = tensors_of(out);
done:
  Py_XDECREF(tensors);
  Py_XDECREF(floats);
  Py_XDECREF(plan);
  Py_XDECREF(inputs);
  Py_XDECREF(out);
  return result;
}

/* run_lowered(func, args, kwargs): a functional op through its plan, its new wse tensor(s), or
   None (the general path). */
PyObject* record_run_lowered(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "run_lowered takes (func, args, kwargs)");
    return NULL;
  }
  return lowered(args, g_miss);
}

/* ---- foreach calls (tensor/foreach.py _replay) ------------------------------------------- */

/* write(t, node): its fast case, a tensor over all of its storage given a node of its own
   shape and dtype (wse_tensor.write: st.set_node(node)), else the Python function. 0 or -1. */
static int write_to(PyObject* t, PyObject* node) {
  PyObject *st = PyObject_GetAttr(t, s_st), *meta = NULL, *full = NULL, *dtype = NULL;
  PyObject* numel = NULL;
  int fast = 0;
  if (st && (meta = PyObject_GetAttr(t, s_meta)) && PyTuple_Check(meta) &&
      PyTuple_Size(meta) == 5 && (full = PyObject_GetAttr(t, s_full)) && full == Py_True &&
      (dtype = PyObject_GetAttr(st, s_dtype)) && dtype == PyTuple_GetItem(meta, 4) &&
      node_check(node) && node_dtype(node) == dtype && (numel = PyObject_GetAttr(st, s_numel))) {
    PyObject *size = PyTuple_GetItem(meta, 0), *shape = node_shape(node);
    fast = PyObject_RichCompareBool(numel, PyTuple_GetItem(meta, 3), Py_EQ) == 1 &&
           (shape == size || PyObject_RichCompareBool(shape, size, Py_EQ) == 1);
  }
  PyObject* done = NULL;
  if (!PyErr_Occurred())
    done = fast ? PyObject_CallMethodObjArgs(st, s_set_node, node, NULL)
                : PyObject_CallFunctionObjArgs(g_write, t, node, NULL);
  Py_XDECREF(st);
  Py_XDECREF(meta);
  Py_XDECREF(full);
  Py_XDECREF(dtype);
  Py_XDECREF(numel);
  Py_XDECREF(done);
  return done ? 0 : -1;
}

/* [vals[j] for j in indices], new reference. */
static PyObject* picked(PyObject* vals, PyObject* indices) {
  Py_ssize_t n = PyTuple_Size(indices);
  PyObject* out = n >= 0 ? PyList_New(n) : NULL;
  for (Py_ssize_t i = 0; out && i < n; i++) {
    PyObject* v = PyObject_GetItem(vals, PyTuple_GetItem(indices, i));
    if (!v || PyList_SetItem(out, i, v) < 0) Py_CLEAR(out);
  }
  return out;
}

/* One element: (plan, tensor indices, float indices, shares) on its values `vals`; its result
   appended to `out`, or written to the `targets` values. `made`: plan -> its shared scalar
   nodes (Note [Shared scalars]). */
static int replay_element(PyObject* e, PyObject* vals, PyObject* targets, PyObject* made,
                          PyObject* out) {
  PyObject *p = PyTuple_GetItem(e, 0), *floats = PyTuple_GetItem(e, 2);
  PyObject *scalars = NULL, *given = NULL, *inputs = NULL, *res = NULL;
  int rc = -1;
  if (PyObject_IsTrue(PyTuple_GetItem(e, 3))) {
    scalars = PyDict_GetItemWithError(made, p);
    Py_XINCREF(scalars);
    if (!scalars && !PyErr_Occurred() && (given = picked(vals, floats)) &&
        (scalars = PyObject_CallMethodObjArgs(p, s_scalar_nodes, given, NULL)) &&
        PyDict_SetItem(made, p, scalars) < 0)
      Py_CLEAR(scalars);
    Py_CLEAR(given);
    if (!scalars) goto done;
  } else if (!(given = PyTuple_Size(floats) ? picked(vals, floats) : Py_NewRef(floats))) {
    goto done;
  }
  PyObject* tensors = picked(vals, PyTuple_GetItem(e, 1));
  inputs = tensors ? values_of(tensors) : NULL;
  Py_XDECREF(tensors);
  if (!inputs || !(res = run_plan(p, inputs, given ? given : Py_None, scalars))) goto done;
  if (targets == Py_None) {
    PyObject* made_t = tensors_of(res);
    rc = made_t ? PyList_Append(out, made_t) : -1;
    Py_XDECREF(made_t);
    goto done;
  }
  Py_ssize_t k = PyTuple_Size(targets), nres = PyTuple_Check(res) ? PyTuple_Size(res) : 1;
  rc = 0;
  for (Py_ssize_t i = 0; rc == 0 && i < k && i < nres; i++) {
    PyObject* t = PyObject_GetItem(vals, PyTuple_GetItem(targets, i));
    rc = t ? write_to(t, PyTuple_Check(res) ? PyTuple_GetItem(res, i) : res) : -1;
    Py_XDECREF(t);
  }
done:
  Py_XDECREF(scalars);
  Py_XDECREF(given);
  Py_XDECREF(inputs);
  Py_XDECREF(res);
  return rc;
}

/* replay_elements(elements, targets, rows): a foreach call's ListPlan replayed, one element per
   row of values (foreach.py _replay); the new tensors, or [] when `targets` are written. */
PyObject* record_replay_elements(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  if (nargs != 3 || !PyList_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "replay_elements takes (elements list, targets, rows)");
    return NULL;
  }
  PyObject *out = PyList_New(0), *made = PyDict_New(), *rows = PyObject_GetIter(args[2]);
  Py_ssize_t n = PyList_Size(args[0]);
  for (Py_ssize_t i = 0; out && made && rows && i < n; i++) {
    PyObject* vals = PyIter_Next(rows);
    if (!vals) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fewer rows than elements");
      Py_CLEAR(out);
      break;
    }
    if (replay_element(PyList_GetItem(args[0], i), vals, args[1], made, out) < 0) Py_CLEAR(out);
    Py_DECREF(vals);
  }
  if (!made || !rows) Py_CLEAR(out);
  Py_XDECREF(made);
  Py_XDECREF(rows);
  return out;
}

/* ---- views (replay.run_view) -------------------------------------------------------------- */

/* One view of `st` from its specs (size, stride, offset, meta, full): WseTensor._view. */
static PyObject* view_of(PyObject* st, PyObject* dtype, PyObject* specs) {
  if (!PyTuple_Check(specs) || PyTuple_Size(specs) != 5) {
    PyErr_SetString(PyExc_TypeError, "a view's specs are (size, stride, offset, meta, full)");
    return NULL;
  }
  PyObject* meta = PyTuple_GetItem(specs, 3);
  return wrap(st, PyTuple_GetItem(specs, 0), PyTuple_GetItem(specs, 1), PyTuple_GetItem(specs, 2),
              dtype, meta, PyTuple_GetItem(specs, 4));
}

/* run_view(func, args, kwargs, base): new wse tensors over base's storage from the cached output
   specs (a list of them for several views), or None (the general path). */
PyObject* record_run_view(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "run_view takes (func, args, kwargs, base)");
    return NULL;
  }
  PyObject *tensors = PyList_New(0), *floats = PyList_New(0), *result = NULL, *st = NULL;
  PyObject *dtype = NULL, *specs = tensors && floats ? find_plan(args, tensors, floats, g_view_miss,
                                                             args[3]) : NULL;
  if (!specs || specs == Py_None) {
    if (!PyErr_Occurred()) result = Py_NewRef(Py_None);
    goto done;
  }
  if (!(st = PyObject_GetAttr(args[3], s_st)) || !(dtype = PyObject_GetAttr(st, s_dtype)))
    goto done;
  if (!PyList_Check(specs)) {
    result = view_of(st, dtype, specs);
    goto done;
  }
  Py_ssize_t n = PyList_Size(specs);
  if (!(result = PyTuple_New(n))) goto done;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = view_of(st, dtype, PyList_GetItem(specs, i));
    if (!v || PyTuple_SetItem(result, i, v) < 0) {
      Py_CLEAR(result);
      break;
    }
  }
done:
  Py_XDECREF(tensors);
  Py_XDECREF(floats);
  Py_XDECREF(specs);
  Py_XDECREF(st);
  Py_XDECREF(dtype);
  return result;
}

/* ---- dispatch (wse_tensor.__torch_dispatch__, dispatch.dispatch) ------------------------- */

/* A view (VIEW: through its cached specs; ALIAS: detach and alias, the tensor's own view) of
   `call[3]`, the call's first argument, when that is a wse tensor of its storage's dtype (not
   complex, Note [Complex storage]), inference mode is off and the base is not an inference
   tensor (Note [Views in inference mode] in dispatch.py); else NULL, without an error. */
static PyObject* view(long kind, PyObject* call[4]) {
  PyObject *base = call[3], *st = NULL, *meta = NULL, *dtype = NULL, *full = NULL, *out = NULL;
  PyObject *inference = PyObject_CallNoArgs(g_inference), *of_inference = NULL;
  if (inference == Py_False && (PyObject*)Py_TYPE(base) == g_tensor_type &&
      (of_inference = PyObject_CallMethodObjArgs(base, s_is_inference, NULL)) &&
      of_inference == Py_False &&
      (st = PyObject_GetAttr(base, s_st)) && (meta = PyObject_GetAttr(base, s_meta)) &&
      (dtype = PyObject_GetAttr(st, s_dtype)) && PyTuple_Check(meta) &&
      PyTuple_Size(meta) == 5 && PyTuple_GetItem(meta, 4) == dtype) {
    if (kind == VIEW)
      out = record_run_view(NULL, call, 4);
    else if ((full = PyObject_GetAttr(base, s_full)))
      out = wrap(st, PyTuple_GetItem(meta, 0), PyTuple_GetItem(meta, 1),
                 PyTuple_GetItem(meta, 2), dtype, meta, full);
  }
  if (!of_inference) PyErr_Clear();
  Py_XDECREF(inference);
  Py_XDECREF(of_inference);
  Py_XDECREF(st);
  Py_XDECREF(meta);
  Py_XDECREF(dtype);
  Py_XDECREF(full);
  return out;
}

/* The call through its plan when its op's handler is one of `g_kinds` (dispatch.py's
   lowered_op, view_op, alias_op or a _replayed_first's, as they are; guards.plan_first's,
   replayed as REPLAYED under its op's checked-plan key): its result, or NULL without an error
   when it takes dispatch.py's path (no plan, or a REPLAYED op's plan not yet built there;
   inference mode; a complex view; errors waiting, Note [Errors inside backward]). */
static PyObject* fast_path(PyObject* func, PyObject* args, PyObject* kwargs) {
  PyObject* fid = PyLong_FromVoidPtr(func);
  if (!fid) return NULL;
  PyObject* handler = PyDict_GetItemWithError(g_handlers, fid);   /* borrowed */
  Py_DECREF(fid);
  PyObject* kind = handler ? PyDict_GetItemWithError(g_kinds, handler) : NULL;
  if (!kind || PyList_Size(g_deferred) != 0) return NULL;
  PyObject *call[4] = {func, args, kwargs, NULL}, *out = NULL;
  if (!PyLong_Check(kind)) {   /* Note [Checked plans of index ops] in tensor/guards.py */
    call[0] = kind;
    out = lowered(call, NULL);
    if (out == Py_None) Py_CLEAR(out);
    return out;
  }
  long k = PyLong_AsLong(kind);
  if (k == LOWERED || k == REPLAYED) {   /* REPLAYED: dispatch.py builds and checks plans */
    out = lowered(call, k == LOWERED ? g_miss : NULL);
  } else if ((k == VIEW || k == ALIAS) && PyTuple_Size(args) > 0) {
    call[3] = PyTuple_GetItem(args, 0);
    out = view(k, call);
  }
  if (out == Py_None) Py_CLEAR(out);
  return out;
}

/* Count the op in the current trace, as dispatch.py does. */
static int count_op(void) {
  PyObject* tr = PyObject_GetAttr(g_state, s_current);
  PyObject* nodes = tr ? PyObject_GetAttr(tr, s_nodes) : NULL;
  PyObject* one = PyLong_FromLong(1);
  PyObject* more = nodes && one ? PyNumber_Add(nodes, one) : NULL;
  int rc = more ? PyObject_SetAttr(tr, s_nodes, more) : -1;
  Py_XDECREF(tr);
  Py_XDECREF(nodes);
  Py_XDECREF(one);
  Py_XDECREF(more);
  return rc;
}

/* The call, recorded: through its plan, or by dispatch.py. An error on the fast path goes to
   dispatch.py's `failed`, which raises it as it raises any op's (the user's error in the CPU's
   words; inside backward, deferred). The call is counted either way, as dispatch.py counts. */
static PyObject* record(PyObject* func, PyObject* args, PyObject* kwargs) {
  PyObject* out = fast_path(func, args, kwargs);
  if (!out && !PyErr_Occurred())
    return PyObject_CallFunctionObjArgs(g_dispatch, func, args, kwargs, NULL);
  if (!out && !PyErr_ExceptionMatches(PyExc_Exception)) return NULL;   /* KeyboardInterrupt */
  PyObject *type = NULL, *value = NULL, *tb = NULL;
  if (!out) {
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb) PyException_SetTraceback(value, tb);
  }
  if (count_op() < 0) {
    Py_XDECREF(out);
    out = NULL;
  } else if (!out) {
    out = PyObject_CallFunctionObjArgs(g_failed, value, func, args, kwargs, NULL);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return out;
}

/* WseTensor.__torch_dispatch__(cls, func, types, args=(), kwargs=None), a classmethod. */
PyObject* record_torch_dispatch(PyObject* m, PyObject* const* args, Py_ssize_t nargs) {
  (void)m;
  if (nargs < 3 || nargs > 5 || !g_dispatch) {
    PyErr_SetString(PyExc_TypeError, "__torch_dispatch__(cls, func, types, args=(), kwargs=None)"
                                     " (lazydev.tensor.dispatch sets it up)");
    return NULL;
  }
  PyObject* func = args[1];
  PyObject* call_args = nargs > 3 ? args[3] : NULL;
  PyObject* kwargs = nargs > 4 && args[4] != Py_None ? Py_NewRef(args[4]) : PyDict_New();
  PyObject *modes = PyObject_CallNoArgs(g_modes), *out = NULL, *held = NULL;
  if (!kwargs || !modes) goto done;
  if (PyObject_IsTrue(modes)) {   /* Note [make_fx on wse] */
    PyObject* refused = PyObject_CallFunctionObjArgs(g_refuse, func, NULL);
    if (!refused) goto done;
    Py_DECREF(refused);
  }
  if (call_args)
    Py_INCREF(call_args);
  else if (!(call_args = PyTuple_New(0)))
    goto done;
  if ((held = PyObject_CallNoArgs(g_acquire))) {   /* Note [One recorder at a time] */
    out = record(func, call_args, kwargs);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject* released = PyObject_CallNoArgs(g_release);
    if (!released) Py_CLEAR(out);
    Py_XDECREF(released);
    if (type) PyErr_Restore(type, value, tb);
  }
  Py_DECREF(call_args);
done:
  Py_XDECREF(kwargs);
  Py_XDECREF(modes);
  Py_XDECREF(held);
  return out;
}
