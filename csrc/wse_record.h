/* Between the node type (wse_node.c) and the recording hot path (wse_record.c): one extension
   module, `_lazydev_node`. */
#ifndef WSE_RECORD_H
#define WSE_RECORD_H

/* wse_node.c */
int node_check(PyObject* o);                  /* whether `o` is a Node */
PyObject* node_shape(PyObject* node);         /* borrowed; NULL with TypeError if not a node */
PyObject* node_dtype(PyObject* node);         /* borrowed */
PyObject* node_new(PyObject* const fields[6]);  /* Node.make(op, dtype, shape, src, arg, local) */

/* How the C replays an op's calls (dispatch._NATIVE maps handlers to these; the module has
   them as constants of the same names). */
enum { LOWERED = 1, VIEW = 2, REPLAYED = 3, ALIAS = 4 };

/* wse_record.c: the module's functions */
PyObject* record_setup_tensors(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_setup_replay(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_signature(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_from_node(PyObject* m, PyObject* node);
PyObject* record_run_lowered(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_setup_dispatch(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_run_view(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_replay_elements(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_torch_dispatch(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_set_tensor_maker(PyObject* m, PyObject* address);
PyObject* record_make_tensor(PyObject* m, PyObject* const* args, Py_ssize_t nargs);
PyObject* record_tensors_made(PyObject* m, PyObject* unused);

#endif
