// An empty Python module: `import torchdali._C` loads this library, whose static
// TORCH_LIBRARY blocks register the ops (as in pytorch/extension-cpp).
#include <Python.h>

extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {
      PyModuleDef_HEAD_INIT,
      "_C",  // name
      nullptr,  // doc
      -1,  // size
      nullptr,  // methods
  };
  return PyModule_Create(&module_def);
}
}
