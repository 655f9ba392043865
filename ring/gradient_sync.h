// GradientSync: what the trainer's step needs of a dense-gradient synchroniser, whichever moves
// the bytes: GradientFuser (the CPU ring, host memory) or DeviceGradientFuser (device memory
// through a DeviceCollective such as NCCL). Both fuse the gradients into buckets in ready order
// and start each bucket while backward goes on.
#pragma once

namespace aiacc::ring {

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  // Starts a step: no gradient is ready yet. Call before backward.
  virtual void begin_step() = 0;
  // Returns once every bucket is reduced in place (the parameters' gradients are its views);
  // rethrows a communication failure naming the peer.
  virtual void finish_step() = 0;
  // Seconds finish_step() waited in the last step (communication not hidden behind backward).
  virtual double last_exposed_seconds() const = 0;
  // Seconds of communication in the last step, overlapped or not.
  virtual double last_communication_seconds() const = 0;
};

}  // namespace aiacc::ring
