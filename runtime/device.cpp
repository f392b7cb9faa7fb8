#include "runtime/device.hpp"

#include <stdexcept>
#include <utility>

#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {

Device::Device(int ordinal) : ordinal_(ordinal) {
  const DriverApi& cu = driver();
  int count = 0;
  FP8C_CU(cu.cuDeviceGetCount(&count));
  if (ordinal < 0 || ordinal >= count)
    throw Unavailable("GPU " + std::to_string(ordinal) + " does not exist (" +
                      std::to_string(count) + " found)");
  FP8C_CU(cu.cuDeviceGet(&device_, ordinal));
  FP8C_CU(cu.cuDevicePrimaryCtxRetain(&context_, device_));
  FP8C_CU(cu.cuCtxSetCurrent(context_));
  char name[256] = {};
  FP8C_CU(cu.cuDeviceGetName(name, sizeof name, device_));
  name_ = name;
  FP8C_CU(cu.cuDeviceGetAttribute(&sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_));
  FP8C_CU(cu.cuDeviceGetAttribute(&major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_));
  FP8C_CU(cu.cuDeviceGetAttribute(&minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_));
}

Device::~Device() {
  if (context_) driver().cuDevicePrimaryCtxRelease(device_);
}

void Device::make_current() const {
  FP8C_CU(driver().cuCtxSetCurrent(context_));
}

void Device::synchronize() const {
  FP8C_CU(driver().cuCtxSynchronize());
}

std::string Device::arch() const {
  const int cc = compute_capability();
  return "sm_" + std::to_string(cc) + (cc == 90 || cc == 100 ? "a" : "");
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  // cuMemAlloc refuses 0 bytes; an empty tensor still gets a valid pointer.
  FP8C_CU(driver().cuMemAlloc(&pointer_, bytes == 0 ? 1 : bytes));
}

PinnedHostBuffer::PinnedHostBuffer(std::size_t bytes) : bytes_(bytes) {
  FP8C_CU(driver().cuMemAllocHost(&pointer_, bytes == 0 ? 1 : bytes));
}

PinnedHostBuffer::~PinnedHostBuffer() {
  if (pointer_) driver().cuMemFreeHost(pointer_);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
  if (this != &other) {
    if (pointer_) driver().cuMemFreeHost(pointer_);
    pointer_ = std::exchange(other.pointer_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (pointer_) driver().cuMemFree(pointer_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : pointer_(std::exchange(other.pointer_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (pointer_) driver().cuMemFree(pointer_);
    pointer_ = std::exchange(other.pointer_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void copy_to_device(CUdeviceptr to, const void* from, std::size_t bytes) {
  if (bytes == 0) return;
  // The explicit legacy stream, whichever default stream the entry points
  // resolved to, and waiting for it: that wait covers the DMA out of the
  // staging buffer, which cuMemcpyHtoD alone does not.
  FP8C_CU(driver().cuMemcpyHtoDAsync(to, from, bytes, CU_STREAM_LEGACY));
  FP8C_CU(driver().cuStreamSynchronize(CU_STREAM_LEGACY));
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  if (offset + bytes > bytes_) throw std::out_of_range("DeviceBuffer::upload past the end");
  copy_to_device(pointer_ + offset, host, bytes);
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) throw std::out_of_range("DeviceBuffer::download past the end");
  if (bytes) FP8C_CU(driver().cuMemcpyDtoH(host, pointer_ + offset, bytes));
}

void DeviceBuffer::fill(unsigned char byte, CUstream stream) {
  FP8C_CU(driver().cuMemsetD8Async(pointer_, byte, bytes_ == 0 ? 1 : bytes_, stream));
}

void DeviceBuffer::fill(unsigned char byte) {
  // A memset is asynchronous even without a stream; on the legacy stream it
  // is not ordered with non-blocking streams, so wait for it here.
  fill(byte, CU_STREAM_LEGACY);
  FP8C_CU(driver().cuStreamSynchronize(CU_STREAM_LEGACY));
}

Stream::Stream(bool blocking) {
  FP8C_CU(driver().cuStreamCreate(&stream_, blocking ? CU_STREAM_DEFAULT : CU_STREAM_NON_BLOCKING));
}
Stream::~Stream() {
  if (stream_) driver().cuStreamDestroy(stream_);
}
void Stream::synchronize() const {
  FP8C_CU(driver().cuStreamSynchronize(stream_));
}

Event::Event() {
  FP8C_CU(driver().cuEventCreate(&event_, CU_EVENT_DEFAULT));
}
Event::~Event() {
  if (event_) driver().cuEventDestroy(event_);
}
void Event::record(CUstream stream) const {
  FP8C_CU(driver().cuEventRecord(event_, stream));
}
void Event::synchronize() const {
  FP8C_CU(driver().cuEventSynchronize(event_));
}
float Event::since(const Event& start) const {
  float ms = 0;
  FP8C_CU(driver().cuEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

Module::Module(const std::vector<char>& cubin) {
  FP8C_CU(driver().cuModuleLoadData(&module_, cubin.data()));
}
Module::~Module() {
  if (module_) driver().cuModuleUnload(module_);
}
Module::Module(Module&& other) noexcept : module_(std::exchange(other.module_, nullptr)) {}

CUfunction Module::function(const std::string& name) const {
  CUfunction f = nullptr;
  FP8C_CU(driver().cuModuleGetFunction(&f, module_, name.c_str()));
  return f;
}

void launch(CUfunction function, const LaunchShape& s, CUstream stream, void** arguments) {
  if (s.grid[0] == 0 || s.grid[1] == 0 || s.grid[2] == 0) return;  // nothing to do
  FP8C_CU(driver().cuLaunchKernel(function, s.grid[0], s.grid[1], s.grid[2], s.block[0], s.block[1],
                                  s.block[2], s.shared_bytes, stream, arguments, nullptr));
}

}  // namespace fp8c::runtime
