/* wse_autocast.cpp -- torch.autocast("wse"): PyTorch's own autocast policies, for wse.
 *
 * The op lists are the ones CUDA uses, which autocast_mode.h shares with other backends
 * (AT_FORALL_*); the kernels cast their arguments (caching the casts of fp32 weights) and call
 * on, as CUDA's do. Built at the first torch.autocast("wse") against the installed torch
 * (lazydev/compile/hooks.py, Note [Autocast on wse]) and loaded into the process; registering
 * is all loading it does.
 */
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace at::autocast {
namespace {

/* CUDA's answer too: the loss takes probabilities, which a lower precision rounds to 0 or 1. */
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                   int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast on wse, as on CUDA. Use torch.nn.functional."
              "binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, which combine "
              "the sigmoid and the loss and are safe to autocast; or compute the loss outside "
              "torch.autocast, in float32");
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define WSE_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(WSE_LOWER_PRECISION_FP)
#define WSE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(WSE_FP32)
#define WSE_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(WSE_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
#define WSE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(WSE_PROMOTE)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"),
         TORCH_FN(binary_cross_entropy_banned));
}

}  // namespace
}  // namespace at::autocast
