/* wse_hooks.cpp -- what torch asks of a device in C++: a storage allocator and the PrivateUse1
 * hooks (pinned memory, random generators).
 *
 * Built at first import against the installed torch's headers (lazydev/compile/hooks.py, Note
 * [The device's C++ side]); the only C++ in lazydev. A device registered from Python alone has
 * no allocator (torch dereferenced the null pointer: SIGSEGV) and hooks that raise for pinned
 * memory and generators.
 */
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

namespace {

const char* const kRefusal =
    "wse storages are not made directly: the values of a wse tensor live in the lazydev "
    "runtime's buffers, not in a storage. Make a tensor instead (torch.empty(n, "
    "dtype=torch.uint8, device='wse')), copy a tensor with t.clone(), or move the storage's "
    "tensor to the CPU first (t.cpu().untyped_storage())";

/* wse tensors never allocate through it (a wse tensor is a wrapper whose values live in the
   runtime's buffers); what reaches it is a storage made directly: torch.UntypedStorage(n,
   device="wse"), a storage's clone(). */
struct RefusingAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(nbytes == 0, kRefusal);   // an empty storage needs no memory
    return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::PrivateUse1, 0));
  }
  void copy_data(void*, const void*, std::size_t count) const override {
    TORCH_CHECK(count == 0, kRefusal);
  }
};

/* The device is host memory and copies to it read any host memory alike, so every host
   pointer counts as pinned for wse: pin_memory() (DataLoader(pin_memory=True), which pins
   for the current accelerator) returns the tensor as it is. Random numbers for wse come from
   the CPU's generators (a wse randn draws what the CPU's would), so the default generator is
   the CPU's and a new one is a CPU generator. */
struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  bool isPinnedPtr(const void*) const override { return true; }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return c10::GetAllocator(c10::DeviceType::CPU);
  }
  at::Device getDeviceFromPtr(void*) const override { return at::Device(c10::DeviceType::CPU); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
};

RefusingAllocator refusing_allocator;

}  // namespace

/* Returns 0, or 1 when PrivateUse1 hooks were registered before (then only the allocator is
   installed). */
extern "C" __attribute__((visibility("default"))) int wse_install_hooks(void) {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &refusing_allocator);
  if (at::isPrivateUse1HooksRegistered()) return 1;
  at::RegisterPrivateUse1HooksInterface(new Hooks());   // torch keeps it for the process
  return 0;
}
