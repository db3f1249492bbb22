// A CUDA module of another table version (tests/device_module_test.cpp): the loader must refuse it by name.
#include "cuda/cuda_module.h"

extern "C" __attribute__((visibility("default"))) const canvas::cuda_module::Table* canvas_cuda_module() {
  static const canvas::cuda_module::Table table = [] {
    canvas::cuda_module::Table t{};
    t.version = canvas::cuda_module::kVersion + 1;
    return t;
  }();
  return &table;
}
