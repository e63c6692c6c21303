/* wse_hooks.cpp -- what torch asks of a device in C++: an allocator, a device guard and the
 * PrivateUse1 hooks; and the wse tensor object itself (wse_make_tensor).
 *
 * Built at first import against the installed torch's headers (lazydev/compile/hooks.py, Note
 * [The device's C++ side]); the only C++ in lazydev. A device registered from Python alone has
 * no allocator (torch dereferenced the null pointer: SIGSEGV), a device guard that cannot
 * synchronize, and hooks that raise for pinned memory and generators.
 */
#include <Python.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/TensorBase.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/csrc/Dtype.h>

#include <algorithm>
#include <exception>

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

/* Note [Native tensor objects]
   Every recorded op's result is a new Python tensor, and torch.Tensor._make_wrapper_subclass
   made each in 2.0-2.2 us of the 8-10 a replayed op costs: its argument parser takes fifteen
   optional arguments, SymInt lists among them. wse_make_tensor makes the same object from
   what the recording path already holds (its class, size and stride tuples, offset, dtype):
   the storage of no data that the wrapper gives a subclass's tensor (a meta allocator's, of
   the bytes the view spans), a TensorImpl with the PrivateUse1 key, the Python dispatch bit,
   and torch's own wrapping (THPVariable_Wrap with the class), which the wrapper ends with too.
   It takes 0.5 us. The tensor is the wrapper's to the dispatch key (tests/test_device.py
   compares them). It returns NULL with no error for what it does not take (another dtype
   object, sizes that are not small non-negative ints, more than kMaxDims dims, an overflowing
   byte count): the caller then asks the wrapper, which raises where it should. Called with
   the GIL held, from csrc/wse_record.c. */
constexpr Py_ssize_t kMaxDims = 64;

/* Declared in torch/csrc/autograd/python_variable.h, whose include chain takes 25 s to
   compile on this VM against 5 for all of this file (libtorch_python exports it). */
PyObject* THPVariable_Wrap(const at::TensorBase& var, PyTypeObject* type);

namespace {

/* `tuple` as `n` int64s into `out`; false for anything else (negative when !signed_ok). */
bool read_ints(PyObject* tuple, Py_ssize_t n, int64_t* out, bool signed_ok) {
  if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != n) return false;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = PyTuple_GET_ITEM(tuple, i);
    if (!PyLong_CheckExact(v)) return false;
    int overflow = 0;
    out[i] = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (out[i] == -1 && PyErr_Occurred()) || (!signed_ok && out[i] < 0)) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
}

/* The bytes a view spans (at::detail::computeStorageNbytes), or -1 on overflow. */
int64_t span_bytes(const int64_t* size, const int64_t* stride, Py_ssize_t n, int64_t offset,
                   int64_t item) {
  int64_t end = 1;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (size[i] == 0) return 0;
    int64_t step;
    if (stride[i] < 0 || __builtin_mul_overflow(size[i] - 1, stride[i], &step) ||
        __builtin_add_overflow(end, step, &end))
      return -1;
  }
  int64_t bytes;
  if (__builtin_add_overflow(end, offset, &end) || __builtin_mul_overflow(end, item, &bytes))
    return -1;
  return bytes;
}

}  // namespace

extern "C" __attribute__((visibility("default")))
PyObject* wse_make_tensor(PyObject* cls, PyObject* size, PyObject* stride, PyObject* offset,
                          PyObject* dtype) {
  if (!PyTuple_Check(size) || !THPDtype_Check(dtype) || !PyLong_CheckExact(offset)) return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(size);
  int64_t sizes[kMaxDims], strides[kMaxDims], off;
  if (n > kMaxDims || !read_ints(size, n, sizes, false) || !read_ints(stride, n, strides, true))
    return NULL;
  int overflow = 0;
  off = PyLong_AsLongLongAndOverflow(offset, &overflow);
  if (overflow || off < 0) return NULL;
  const at::ScalarType scalar = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  const int64_t nbytes = span_bytes(sizes, strides, n, off, c10::elementSize(scalar));
  if (nbytes < 0) return NULL;
  try {
    const c10::Device device(kWse, 0);
    c10::Storage storage{c10::Storage::use_byte_size_t{}, static_cast<size_t>(nbytes),
                         c10::DataPtr{nullptr, device}, c10::GetAllocator(c10::kMeta),
                         /*resizable=*/true};
    at::TensorBase t(c10::make_intrusive<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        c10::scalarTypeToTypeMeta(scalar)));
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    impl->set_sizes_and_strides(c10::IntArrayRef(sizes, n), c10::IntArrayRef(strides, n), off);
    impl->set_python_dispatch(true);
    return THPVariable_Wrap(t, reinterpret_cast<PyTypeObject*>(cls));
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return NULL;
  }
}

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
