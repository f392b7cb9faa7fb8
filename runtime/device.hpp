// The GPU as fp8c uses it: one device's primary context, memory, streams,
// events and loaded modules, each an RAII owner over Driver API handles.
// Every call's result is checked (FP8C_CU) and turned into an exception that
// names the call.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/cuda_driver.hpp"

namespace fp8c::runtime {

class Device {
 public:
  // Retains device `ordinal`'s primary context and makes it current on the
  // calling thread. Throws Unavailable without a driver or GPU.
  explicit Device(int ordinal = 0);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Makes this device's context current on the calling thread.
  void make_current() const;
  void synchronize() const;

  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }
  int sm_count() const { return sm_count_; }
  int compute_capability() const { return major_ * 10 + minor_; }
  // "sm_90a" on Hopper, where fp8c uses the arch-specific instructions.
  std::string arch() const;

 private:
  int ordinal_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  std::string name_;
  int sm_count_ = 0;
  int major_ = 0;
  int minor_ = 0;
};

// Copies `bytes` from host memory to device memory and returns only once
// the data is in place, so work enqueued afterwards on ANY stream, non-blocking
// ones included, sees it. (A bare cuMemcpyHtoD from pageable memory returns
// once the data is staged, before the DMA into device memory has finished,
// and that DMA is ordered only with the legacy default stream and blocking
// streams: a kernel on a non-blocking stream can read the old bytes.) It is
// enqueued on the legacy default stream, after the work of that stream and of
// blocking streams; work on a non-blocking stream that still uses the
// destination must have been waited for by the caller.
void copy_to_device(CUdeviceptr to, const void* from, std::size_t bytes);

// Device memory. upload, download and fill without a stream block the
// calling thread until they are done; they run on the legacy default stream,
// so they are not ordered after work on a non-blocking stream: synchronise
// the stream that last used the buffer before reading it back (download) or
// overwriting it (upload, fill).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;

  CUdeviceptr get() const { return pointer_; }
  std::size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(pointer_);
  }

  // Complete on return (copy_to_device).
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  // Complete on return.
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  // Every byte set to `byte`, enqueued on `stream`: ordered after that
  // stream's work and before what is enqueued there next, nothing more.
  void fill(unsigned char byte, CUstream stream);
  // Every byte set to `byte`, complete on return (like upload), so a kernel on
  // any stream launched afterwards sees it.
  void fill(unsigned char byte);

 private:
  CUdeviceptr pointer_ = 0;
  std::size_t bytes_ = 0;
};

// Page-locked host memory, so that a copy from the device into it is
// asynchronous (enqueued, not waited for) and can be watched by an event.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(std::size_t bytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;

  void* get() const { return pointer_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* pointer_ = nullptr;
  std::size_t bytes_ = 0;
};

class Stream {
 public:
  // Non-blocking: ordered with nothing else. Blocking: ordered with the
  // legacy default stream (stream 0), as a framework's default stream is.
  explicit Stream(bool blocking = false);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize() const;

 private:
  CUstream stream_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }
  void record(CUstream stream) const;
  void synchronize() const;
  // Milliseconds from `start` to this event (both recorded and complete).
  float since(const Event& start) const;

 private:
  CUevent event_ = nullptr;
};

// A CUBIN loaded into the current context, and its kernels.
class Module {
 public:
  explicit Module(const std::vector<char>& cubin);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&& other) noexcept;

  CUfunction function(const std::string& name) const;

 private:
  CUmodule module_ = nullptr;
};

struct LaunchShape {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
};

// Launches `function` with pointers to its arguments, as cuLaunchKernel takes them.
void launch(CUfunction function, const LaunchShape& shape, CUstream stream, void** arguments);

}  // namespace fp8c::runtime
