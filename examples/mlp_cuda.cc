#include "mlp_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#define MLP_EXAMPLE_NO_LOOP_REGISTRATION
#include "mlp.h"

namespace mlp_example {
namespace {

void Check(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(e));
}
void Check(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + ": " + cublasGetStatusString(s));
}
#define MLP_CUDA(call) Check((call), #call)

// A device float array of a fixed size.
struct Buffer {
  float* p = nullptr;
  size_t n = 0;
  void Reserve(size_t count) {
    if (count <= n) return;
    if (p) MLP_CUDA(cudaFree(p));
    p = nullptr;
    MLP_CUDA(cudaMalloc(&p, count * sizeof(float)));
    n = count;
  }
  void Upload(const float* src, size_t count) {
    Reserve(count);
    MLP_CUDA(cudaMemcpy(p, src, count * sizeof(float), cudaMemcpyHostToDevice));
  }
  void Download(float* dst, size_t count) const {
    MLP_CUDA(cudaMemcpy(dst, p, count * sizeof(float), cudaMemcpyDeviceToHost));
  }
  ~Buffer() {
    if (p) cudaFree(p);  // destructor: nothing to report to
  }
};

}  // namespace

bool CudaDeviceAvailable() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct MlpCuda::Device {
  cublasHandle_t blas = nullptr;
  Buffer params, x, h, dl, dh, grad;
};

MlpCuda::MlpCuda(Mlp* host) : host_(host), dev_(new Device) {
  try {
    MLP_CUDA(cublasCreate(&dev_->blas));
    UploadParams();
  } catch (...) {
    if (dev_->blas) cublasDestroy(dev_->blas);
    delete dev_;
    throw;
  }
}

MlpCuda::~MlpCuda() {
  if (dev_->blas) cublasDestroy(dev_->blas);
  delete dev_;
}

void MlpCuda::UploadParams() { dev_->params.Upload(host_->params.data(), host_->params.size()); }

void MlpCuda::Step(float lr) {
  host_->Step(lr);
  UploadParams();
}

double MlpCuda::Backward(const lumen::train::Batch& batch, int* correct,
                         const std::function<void(std::span<float>)>& ready) {
  Mlp& m = *host_;
  Device& d = *dev_;
  const int B = static_cast<int>(batch.size), in = m.inputs, hid = m.hidden, cls = m.classes;
  const float one = 1.f, zero = 0.f;
  const float* W1 = d.params.p;
  const float* W2 = d.params.p + m.W2();
  d.x.Upload(batch.features.data(), static_cast<size_t>(B) * in);
  // A row-major r×c matrix is a column-major c×r one: C = A·B row-major is
  // C^T = B^T·A^T column-major. H = X·W1^T  ⇒  H^T (hid×B) = W1 · X^T.
  d.h.Reserve(static_cast<size_t>(B) * hid);
  MLP_CUDA(cublasSgemm(d.blas, CUBLAS_OP_T, CUBLAS_OP_N, hid, B, in, &one, W1, in, d.x.p, in,
                       &zero, d.h.p, hid));
  std::vector<float> h(static_cast<size_t>(B) * hid);
  d.h.Download(h.data(), h.size());
  for (int s = 0; s < B; ++s)
    for (int j = 0; j < hid; ++j) {
      float& a = h[static_cast<size_t>(s) * hid + j];
      a += m.params[m.B1() + j];
      a = a > 0 ? a : 0;
    }
  d.h.Upload(h.data(), h.size());
  // Z = H·W2^T  ⇒  Z^T (cls×B) = W2 · H^T.
  d.dl.Reserve(static_cast<size_t>(B) * cls);
  MLP_CUDA(cublasSgemm(d.blas, CUBLAS_OP_T, CUBLAS_OP_N, cls, B, hid, &one, W2, hid, d.h.p, hid,
                       &zero, d.dl.p, cls));
  std::vector<float> dl(static_cast<size_t>(B) * cls);
  d.dl.Download(dl.data(), dl.size());
  double loss = 0;
  for (int s = 0; s < B; ++s) {
    float* z = &dl[static_cast<size_t>(s) * cls];
    float best = -1e30f, mx = -1e30f;
    int arg = 0;
    for (int c = 0; c < cls; ++c) {
      z[c] += m.params[m.B2() + c];
      if (z[c] > best) best = z[c], arg = c;
      mx = std::max(mx, z[c]);
    }
    double sum = 0;
    for (int c = 0; c < cls; ++c) sum += std::exp(z[c] - mx);
    const int label = static_cast<int>(batch.y(s)[0]);
    loss += -(z[label] - mx - std::log(sum));
    if (arg == label) ++*correct;
    for (int c = 0; c < cls; ++c) {
      z[c] = static_cast<float>(std::exp(z[c] - mx) / sum) - (c == label ? 1.f : 0.f);
      z[c] /= B;
    }
  }
  d.dl.Upload(dl.data(), dl.size());
  // dW2 = dl^T·H (cls×hid)  ⇒  dW2^T (hid×cls) = H^T · dl.
  d.grad.Reserve(std::max(static_cast<size_t>(cls) * hid, static_cast<size_t>(hid) * in));
  MLP_CUDA(cublasSgemm(d.blas, CUBLAS_OP_N, CUBLAS_OP_T, hid, cls, B, &one, d.h.p, hid, d.dl.p,
                       cls, &zero, d.grad.p, hid));
  std::vector<float> g(static_cast<size_t>(cls) * hid);
  d.grad.Download(g.data(), g.size());
  for (size_t i = 0; i < g.size(); ++i) m.grads[m.W2() + i] += g[i];
  for (int s = 0; s < B; ++s)
    for (int c = 0; c < cls; ++c) m.grads[m.B2() + c] += dl[static_cast<size_t>(s) * cls + c];
  ready(std::span<float>(m.grads.data() + m.W2(), m.Size() - m.W2()));
  // dH = dl·W2 (B×hid)  ⇒  dH^T (hid×B) = W2^T · dl^T; then the ReLU mask.
  d.dh.Reserve(static_cast<size_t>(B) * hid);
  MLP_CUDA(cublasSgemm(d.blas, CUBLAS_OP_N, CUBLAS_OP_N, hid, B, cls, &one, W2, hid, d.dl.p, cls,
                       &zero, d.dh.p, hid));
  std::vector<float> dh(static_cast<size_t>(B) * hid);
  d.dh.Download(dh.data(), dh.size());
  for (size_t i = 0; i < dh.size(); ++i)
    if (h[i] <= 0) dh[i] = 0;
  d.dh.Upload(dh.data(), dh.size());
  // dW1 = dH^T·X (hid×in)  ⇒  dW1^T (in×hid) = X^T · dH.
  MLP_CUDA(cublasSgemm(d.blas, CUBLAS_OP_N, CUBLAS_OP_T, in, hid, B, &one, d.x.p, in, d.dh.p, hid,
                       &zero, d.grad.p, in));
  g.resize(static_cast<size_t>(hid) * in);
  d.grad.Download(g.data(), g.size());
  for (size_t i = 0; i < g.size(); ++i) m.grads[i] += g[i];
  for (int s = 0; s < B; ++s)
    for (int j = 0; j < hid; ++j) m.grads[m.B1() + j] += dh[static_cast<size_t>(s) * hid + j];
  const size_t half = m.B1() / 2;  // as the CPU path: layer 1 in two halves
  ready(std::span<float>(m.grads.data() + half, m.W2() - half));
  ready(std::span<float>(m.grads.data(), half));
  return loss;
}

}  // namespace mlp_example
