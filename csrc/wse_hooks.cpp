/* wse_hooks.cpp -- what torch asks of a device in C++: an allocator, a device guard and the
 * PrivateUse1 hooks.
 *
 * Built at first import against the installed torch's headers (lazydev/compile/hooks.py, Note
 * [The device's C++ side]); the only C++ in lazydev. A device registered from Python alone has
 * no allocator (torch dereferenced the null pointer: SIGSEGV), a device guard that cannot
 * synchronize, and hooks that raise for pinned memory and generators.
 */
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <algorithm>

#include "wse_torch_api.h"

namespace {

wse_torch_api api;   // the runtime's side

constexpr c10::DeviceType kWse = c10::DeviceType::PrivateUse1;

void synchronize() {
  char err[2048] = {0};
  TORCH_CHECK(api.synchronize(err, sizeof err) == 0, err);
}

const char* const kRefusal =
    "wse storages are not made directly: the values of a wse tensor live in the lazydev "
    "runtime's buffers, not in a storage. Make a tensor instead (torch.empty(n, "
    "dtype=torch.uint8, device='wse')), copy a tensor with t.clone(), or move the storage's "
    "tensor to the CPU first (t.cpu().untyped_storage()). A DataLoader with num_workers > 0 "
    "asks for one to send a batch of wse tensors from a worker process, which cannot hold "
    "them: return CPU tensors from the Dataset and move each batch to wse in the loop "
    "(x.to('wse'))";

/* wse tensors never allocate through it (a wse tensor is a wrapper whose values live in the
   runtime's buffers); what reaches allocate() is a storage made directly:
   torch.UntypedStorage(n, device="wse"), a storage's clone(). The rest is the runtime's
   accounting, for torch.accelerator.memory_allocated() and its neighbours. */
struct Allocator final : c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK(nbytes == 0, kRefusal);   // an empty storage needs no memory
    return c10::DataPtr(nullptr, c10::Device(kWse, 0));
  }
  void copy_data(void*, const void*, std::size_t count) const override {
    TORCH_CHECK(count == 0, kRefusal);
  }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override { api.empty_cache(); }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex) override {
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    c10::CachingDeviceAllocator::DeviceStats stats;
    auto& allocated = stats.allocated_bytes[all];
    auto& reserved = stats.reserved_bytes[all];
    allocated.current = api.bytes_in_use();
    allocated.peak = api.peak_bytes();
    reserved.current = allocated.current + api.cached_bytes();
    reserved.peak = std::max(reserved.current, allocated.peak);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex) override {}
  void resetPeakStats(c10::DeviceIndex) override { api.reset_peak(); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex) override {
    int64_t capacity = api.capacity(), used = api.bytes_in_use();
    return {static_cast<size_t>(std::max<int64_t>(capacity - used, 0)),
            static_cast<size_t>(capacity)};
  }
};

/* One device, one stream (the runtime's queue), events that record nothing: as the Python
   device guard torch.utils.backend_registration registers, except that synchronizing waits for
   the queue (torch.accelerator.synchronize(), a stream's or event's synchronize()). */
struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kWse; }
  c10::Device exchangeDevice(c10::Device) const override { return getDevice(); }
  c10::Device getDevice() const override { return c10::Device(kWse, 0); }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const override { return stream(); }
  c10::Stream getNewStream(c10::Device, int) const override { return stream(); }
  c10::Stream exchangeStream(c10::Stream) const override { return stream(); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag)
      const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override { synchronize(); }
  void synchronizeEvent(void*) const override { synchronize(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { synchronize(); }

 private:
  static c10::Stream stream() { return c10::Stream(c10::Stream::DEFAULT, c10::Device(kWse, 0)); }
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

Allocator allocator;
Guard guard;

}  // namespace

/* Returns 0, or 1 when a device guard or PrivateUse1 hooks were registered before (torch keeps
   the first; the allocator is installed either way). */
extern "C" __attribute__((visibility("default")))
int wse_install_hooks(const wse_torch_api* runtime) {
  api = *runtime;
  c10::SetAllocator(kWse, &allocator);
  int kept = 0;
  if (c10::impl::hasDeviceGuardImpl(kWse)) {
    kept = 1;
  } else {
    c10::impl::registerDeviceGuard(kWse, &guard);
  }
  if (at::isPrivateUse1HooksRegistered()) {
    kept = 1;
  } else {
    at::RegisterPrivateUse1HooksInterface(new Hooks());   // torch keeps it for the process
  }
  return kept;
}
