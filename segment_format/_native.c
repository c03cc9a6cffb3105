/* Compiled columnar kernel for segment_format (filled in by the columnar decoder work). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static struct PyModuleDef native_module = {PyModuleDef_HEAD_INIT, "_native", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&native_module); }
