// What flows from data/ to models/: a batch of examples, and the description of one example
// (InputSpec) that a model is built for. Both live in core/ so data/ and models/ never meet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace aiacc {

// The ids of one categorical field for a batch, in CSR form: example i owns
// ids[offsets[i] .. offsets[i+1]). offsets has batch_size + 1 entries.
struct SparseField {
  std::vector<std::int64_t> ids;
  std::vector<std::int64_t> offsets;
};

struct Batch {
  Tensor inputs;                   // images [N, C, H, W] or dense features [N, F], f32
  Tensor labels;                   // [N]: i64 class ids, or f32 0/1 targets for CTR
  std::vector<SparseField> sparse; // one per categorical field (CTR), empty for images
  std::int64_t size() const { return labels.defined() ? labels.dim(0) : 0; }
};

enum class Task {
  classification,  // labels are class ids; softmax cross-entropy; accuracy
  binary,          // labels are 0/1; binary cross-entropy; AUC and log loss
};

// One example as a model sees it.
struct InputSpec {
  Task task = Task::classification;
  Shape example_shape;             // [C, H, W] for images, [F] for dense features
  std::int64_t num_classes = 0;    // classification only
  std::vector<std::string> sparse_fields;  // names of the categorical fields (CTR)
};

}  // namespace aiacc
