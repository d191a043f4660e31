// The Python module `torchdali._C`: importing it loads this library, whose static
// TORCH_LIBRARY blocks register the ops (as in pytorch/extension-cpp). Its one Python
// function works on Python objects, which ops cannot take: gathering a list of NumPy
// arrays into one batch.
#include <Python.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/copy.h"

namespace {

// gather_arrays(arrays, address, sample_bytes) -> bool
// Copies `arrays` (objects of one type exporting C-contiguous buffers of one format and
// shape, `sample_bytes` each, such as NumPy arrays) back to back to `address`, the copies
// without the GIL and, for large batches, on torchdali's CPU threads. Returns False, copying
// nothing, if an item is not such a buffer (the caller then takes the samples one by one).
PyObject* gather_arrays(PyObject*, PyObject* args) {
  PyObject* arrays;
  unsigned long long address;
  Py_ssize_t sample_bytes;
  if (!PyArg_ParseTuple(args, "OKn", &arrays, &address, &sample_bytes)) return nullptr;
  PyObject* seq = PySequence_Fast(arrays, "gather_arrays: `arrays` must be a sequence");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<Py_buffer> views;
  views.reserve(n);
  bool ok = true;
  for (Py_ssize_t i = 0; i < n && ok; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    Py_buffer view;
    if (Py_TYPE(item) != Py_TYPE(PySequence_Fast_GET_ITEM(seq, 0)) ||
        PyObject_GetBuffer(item, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
      PyErr_Clear();
      ok = false;
      break;
    }
    views.push_back(view);
    const Py_buffer& first = views[0];
    ok = view.len == sample_bytes && view.ndim == first.ndim &&
         std::strcmp(view.format ? view.format : "B", first.format ? first.format : "B") == 0;
    for (int d = 0; ok && d < view.ndim; ++d) ok = view.shape[d] == first.shape[d];
  }
  if (ok && n > 0) {
    std::vector<const void*> src;
    std::vector<int64_t> offsets{0};
    for (const Py_buffer& view : views) {
      src.push_back(view.buf);
      offsets.push_back(offsets.back() + sample_bytes);
    }
    Py_BEGIN_ALLOW_THREADS
    torchdali::copy_back_to_back(reinterpret_cast<char*>(static_cast<uintptr_t>(address)), src,
                                 offsets);
    Py_END_ALLOW_THREADS
  }
  for (Py_buffer& view : views) PyBuffer_Release(&view);
  Py_DECREF(seq);
  return PyBool_FromLong(ok);
}

PyMethodDef methods[] = {
    {"gather_arrays", gather_arrays, METH_VARARGS,
     "gather_arrays(arrays, address, sample_bytes) -> bool: copy same-shaped buffers back to "
     "back to address (False, copying nothing, if one is not such a buffer)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT,
      "_C",  // name
      nullptr,  // doc
      -1,  // size
      methods,
  };
  return PyModule_Create(&module_def);
}
}
