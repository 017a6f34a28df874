// Autograd kernels of cudal2.matmul and cudal2.linear, in C++ so that calls needing no gradient (inference, and
// compiled graphs, which call the ops through the dispatcher) pay no Python on the way.
//
// Backward (a [..., K], b [K, N]; weight [N, K]): grad_a = grad @ b^T and grad_x = grad @ weight run through
// cudal2.matmul (the transposed operands route to the NT/NN paths); the b, weight and bias gradients run through torch
// (the bias gradient summed to the bias's own shape, for any bias F.linear broadcasts).
#include <ATen/ExpandUtils.h>
#include <torch/autograd.h>
#include <torch/library.h>

namespace cudal2 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&)>& matmul_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("cudal2::matmul", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&)>();
  return op;
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>&
linear_op() {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("cudal2::linear", "").typed<at::Tensor(
      const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&)>();
  return op;
}

// [..., K] -> [M, K]
at::Tensor rows(const at::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

class MatmulFunction : public torch::autograd::Function<MatmulFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    ctx->save_for_backward({a, b});
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return matmul_op().call(a, b);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1], &grad = grads[0];
    at::Tensor grad_a, grad_b;
    if (ctx->needs_input_grad(0)) grad_a = matmul_op().call(grad, b.t());
    if (ctx->needs_input_grad(1)) grad_b = at::matmul(rows(a).t(), rows(grad));
    return {grad_a, grad_b};
  }
};

class LinearFunction : public torch::autograd::Function<LinearFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias) {
    ctx->save_for_backward({x, weight});
    const bool has_bias = bias.has_value() && bias->defined();
    ctx->saved_data["has_bias"] = has_bias;
    if (has_bias) ctx->saved_data["bias_sizes"] = bias->sizes();
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    return linear_op().call(x, weight, bias);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &grad = grads[0];
    at::Tensor grad_x, grad_w, grad_bias;
    if (ctx->needs_input_grad(0)) grad_x = matmul_op().call(grad, weight);  // [.., N] @ [N, K]: an NN GEMM
    if (ctx->needs_input_grad(1)) grad_w = at::matmul(rows(grad).t(), rows(x));
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      grad_bias = at::sum_to(grad, ctx->saved_data["bias_sizes"].toIntVector());
    }
    return {grad_x, grad_w, grad_bias};
  }
};

// Ranks the tuned path does not take (torch.matmul's vector and batched-b cases) run torch's own op, autograd
// included, so their gradients follow torch's broadcasting rules exactly.
at::Tensor matmul_autograd(const at::Tensor& a, const at::Tensor& b) {
  if (a.dim() < 2 || b.dim() != 2) return at::matmul(a, b);
  return MatmulFunction::apply(a, b);
}

at::Tensor linear_autograd(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  if (x.dim() < 2 || weight.dim() != 2) return at::linear(x, weight, bias);
  return LinearFunction::apply(x, weight, bias);
}

}  // namespace
}  // namespace cudal2

TORCH_LIBRARY_IMPL(cudal2, Autograd, m) {
  m.impl("matmul", &cudal2::matmul_autograd);
  m.impl("linear", &cudal2::linear_autograd);
}
