// The MLP example's CUDA path: the same model as mlp_example::Mlp (mlp.h),
// forward and backward GEMMs on the device through cuBLAS (cublasSgemm,
// row-major via the transposed column-major trick); the elementwise parts
// (bias, ReLU mask, softmax cross-entropy) on the host between cudaMemcpy
// calls. Gradients are copied to the host layer by layer into the host Mlp's
// `grads` and handed to the same `ready(span)` calls as the CPU path, so the
// trainer's all-reduce is unchanged.
//
// Thread-safety: none; one instance per training-loop thread (the worker's
// loop thread), bound to the current CUDA device. Owns its device buffers and
// cuBLAS handle. Compiled only when CMake finds the CUDA Toolkit
// (LUMEN_MLP_WITH_CUDA); every CUDA/cuBLAS failure throws std::runtime_error
// naming the call and its error string.
#pragma once

#include <lumen/train/dataset.h>

#include <functional>
#include <span>

namespace mlp_example {

struct Mlp;

// True when the CUDA runtime sees at least one device.
bool CudaDeviceAvailable();

class MlpCuda {
 public:
  // `host` (not owned, outlives this) holds the parameters and the gradients;
  // the parameters are mirrored on the device.
  explicit MlpCuda(Mlp* host);
  ~MlpCuda();
  MlpCuda(const MlpCuda&) = delete;
  MlpCuda& operator=(const MlpCuda&) = delete;

  // As Mlp::Backward: adds this batch's mean gradient to host->grads, calls
  // `ready` for the layer-2 gradients, then the layer-1 ones (two halves).
  double Backward(const lumen::train::Batch& batch, int* correct,
                  const std::function<void(std::span<float>)>& ready);
  // host->Step(lr), then the new parameters are uploaded to the device.
  void Step(float lr);
  // Uploads host->params (after a checkpoint restore, say).
  void UploadParams();

 private:
  struct Device;
  Mlp* host_;
  Device* dev_;
};

}  // namespace mlp_example
