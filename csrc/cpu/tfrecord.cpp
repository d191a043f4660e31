// torchdali::tfrecord_parse on the CPU: the wanted features of a batch of TFRecord records of
// tf.train.Example messages, read from their protobuf wire format on torchdali's CPU threads
// (parallel.h) without the GIL. Two passes: each record is walked once to find where its
// wanted values lie and how many there are; then the outputs, allocated once for the batch,
// are filled record by record. The walk rejects exactly what the Python reference parser of
// torchdali/operators/tfrecord.py rejects (which then says why). Schema: csrc/ops.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "../parallel.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tfrecord.cpp copies the records' little-endian floats as they are"
#endif

namespace {

enum Dtype : int64_t { kInt64 = 0, kString = 1, kFloat32 = 2 };  // torchdali.tfrecord's codes
enum Status : int32_t { kParsed = 0, kBadFraming = 1, kMalformed = 2 };

constexpr int64_t kFraming = 16;  // uint64 length, its CRC, the payload's CRC (not checked)
constexpr int64_t kHeader = 12;   // what precedes the payload
constexpr uint64_t kHugeField = ~0ull;  // the number of a field whose key needs over 64 bits
constexpr int64_t kMinBytesPerTask = 64 << 10;  // less is not worth handing to another thread

struct Malformed {};  // thrown by a record's walk; the record gets kMalformed

struct Field {
  uint64_t number;
  int wire;
  const uint8_t* begin;  // the value's bytes: a varint's own, a length-delimited payload
  const uint8_t* end;
};

// Where a wanted feature's values lie in a record: a string's bytes, float32s, or int64
// varints back to back (each run ends with a varint's last byte).
struct Chunk {
  int64_t feature;
  const uint8_t* begin;
  const uint8_t* end;
};

// The varint at p, of at most 10 bytes before `end`; p moves past it. `huge`: its value
// needs more than 64 bits (the 10th byte holds more than bit 63).
uint64_t varint(const uint8_t*& p, const uint8_t* end, bool& huge) {
  const uint8_t* stop = end - p > 10 ? p + 10 : end;
  uint64_t value = 0;
  for (int shift = 0; p < stop; shift += 7) {
    const uint8_t byte = *p++;
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) {
      huge = shift == 63 && byte > 1;
      return value;
    }
  }
  throw Malformed{};  // truncated, or longer than 10 bytes
}

// The field at p of the message that ends at `end`; p moves past it.
Field next_field(const uint8_t*& p, const uint8_t* end) {
  bool huge = false;
  const uint64_t key = varint(p, end, huge);
  Field f{huge ? kHugeField : key >> 3, static_cast<int>(key & 7), p, p};
  const int64_t left = end - p;
  if (f.wire == 2) {
    const uint64_t length = varint(p, end, huge);
    f.begin = p;
    if (huge || length > static_cast<uint64_t>(end - p)) throw Malformed{};
    p += length;
  } else if (f.wire == 0) {
    varint(p, end, huge);
  } else if (f.wire == 1 || f.wire == 5) {
    const int64_t size = f.wire == 1 ? 8 : 4;
    if (size > left) throw Malformed{};
    p += size;
  } else {
    throw Malformed{};  // groups (3, 4) and the undefined wire types
  }
  f.end = p;
  return f;
}

// Calls visit(field) for each field of the message [p, end).
template <typename Visit>
void for_fields(const uint8_t* p, const uint8_t* end, Visit&& visit) {
  while (p < end) visit(next_field(p, end));
}

// The batch's planned features: names and dtypes.
struct Schema {
  std::vector<std::string> names;
  std::vector<int64_t> dtypes;

  int64_t find(const uint8_t* key, const uint8_t* key_end) const {
    const size_t size = key_end - key;
    for (size_t k = 0; k < names.size(); ++k)
      if (names[k].size() == size && std::memcmp(names[k].data(), key, size) == 0) return k;
    return -1;
  }
};

// Walks records, one at a time, keeping its scratch space between them.
class Walker {
 public:
  explicit Walker(const Schema& schema) : schema_(schema) {}

  // Finds the wanted features of the Example [p, end): their chunks (in record order per
  // feature) and counts[k], the number of values of feature k (-1 where it is missing).
  void walk(const uint8_t* p, const uint8_t* end, std::vector<Chunk>& chunks, int64_t* counts) {
    chunks.clear();
    std::fill(counts, counts + schema_.names.size(), -1);
    // Example.features (1) -> Features.feature (1): map entries of key (1) and Feature (2).
    for_fields(p, end, [&](const Field& features) {
      if (features.number != 1 || features.wire != 2) return;
      for_fields(features.begin, features.end, [&](const Field& entry) {
        if (entry.number != 1 || entry.wire != 2) return;
        Field key{1, 2, entry.begin, entry.begin}, value{};  // no key: the empty one
        bool has_value = false;
        for_fields(entry.begin, entry.end, [&](const Field& part) {
          if (part.wire != 2) return;
          if (part.number == 1) key = part;
          if (part.number == 2) value = part, has_value = true;
        });
        const int64_t k = schema_.find(key.begin, key.end);
        if (k < 0) return;
        // A later entry of the same key replaces an earlier one.
        chunks.erase(std::remove_if(chunks.begin(), chunks.end(), [&](const Chunk& c) { return c.feature == k; }),
                     chunks.end());
        counts[k] = 0;
        if (has_value) feature_values(value, k, chunks);
      });
    });
    for (const Chunk& c : chunks) counts[c.feature] += count(c, schema_.dtypes[c.feature]);
  }

 private:
  // The chunks of a Feature message's values of feature k's dtype. Feature is a oneof of
  // bytes_list (1), float_list (2) and int64_list (3): its last kind wins and lists of that
  // kind given one after another merge; another kind than k's has no values for it.
  void feature_values(const Field& feature, int64_t k, std::vector<Chunk>& chunks) {
    static constexpr uint64_t kListField[] = {3, 1, 2};  // by dtype: int64, string, float32
    const int64_t dtype = schema_.dtypes[k];
    uint64_t kind = 0;
    lists_.clear();
    for_fields(feature.begin, feature.end, [&](const Field& f) {
      if (f.wire != 2 || f.number < 1 || f.number > 3) return;
      if (f.number != kind) kind = f.number, lists_.clear();
      lists_.push_back(f);
    });
    if (kind != kListField[dtype]) return;
    for (const Field& list : lists_) {
      const uint8_t* p = list.begin;
      while (p < list.end) {
        const Field v = next_field(p, list.end);
        if (v.number != 1) continue;
        if (dtype == kString) {
          if (v.wire != 2) continue;
          chunks.push_back({k, v.begin, v.end});
          return;  // the first string; what follows it is not read
        }
        if (dtype == kFloat32 && (v.wire == 2 || v.wire == 5)) {
          if ((v.end - v.begin) % 4) throw Malformed{};  // a packed list's length
          chunks.push_back({k, v.begin, v.end});
        } else if (dtype == kInt64 && (v.wire == 0 || v.wire == 2)) {
          if (v.wire == 2 && v.end > v.begin && v.end[-1] >= 0x80) throw Malformed{};  // ends inside a varint
          chunks.push_back({k, v.begin, v.end});
        }
      }
    }
  }

  // The number of values of a chunk; an int64 varint longer than 10 bytes is malformed.
  static int64_t count(const Chunk& c, int64_t dtype) {
    if (dtype == kString) return c.end - c.begin;
    if (dtype == kFloat32) return (c.end - c.begin) / 4;
    int64_t values = 0, run = 0;
    for (const uint8_t* p = c.begin; p < c.end; ++p) {
      const bool last = *p < 0x80;
      values += last;
      run = last ? 0 : run + 1;
      if (run >= 10) throw Malformed{};
    }
    return values;
  }

  const Schema& schema_;
  std::vector<Field> lists_;
};

// Writes a chunk's values at out (of the feature's dtype); returns the number written.
int64_t write_values(const Chunk& c, int64_t dtype, uint8_t* out) {
  if (dtype != kInt64) {
    std::memcpy(out, c.begin, c.end - c.begin);
    return (c.end - c.begin) / (dtype == kString ? 1 : 4);
  }
  auto* values = reinterpret_cast<int64_t*>(out);
  int64_t n = 0;
  uint64_t value = 0;
  int shift = 0;
  for (const uint8_t* p = c.begin; p < c.end; ++p) {  // each varint has at most 10 bytes here
    value |= static_cast<uint64_t>(*p & 0x7F) << shift;
    shift += 7;
    if (*p < 0x80) {
      values[n++] = static_cast<int64_t>(value);
      value = 0, shift = 0;
    }
  }
  return n;
}

// The records' first bytes, checked: record i is records[i] ... records[i] + spans[i, 2].
std::vector<const uint8_t*> record_starts(const std::vector<at::Tensor>& data, const at::Tensor& spans) {
  TORCH_CHECK_VALUE(spans.is_cpu() && spans.dim() == 2 && spans.size(1) == 3 && spans.scalar_type() == at::kLong,
                    "tfrecord_parse: `spans` must be an int64 CPU tensor [N, 3] (buffer, offset, size), got ",
                    spans.sizes(), " ", spans.scalar_type(), " on ", spans.device());
  for (size_t b = 0; b < data.size(); ++b)
    TORCH_CHECK_VALUE(data[b].is_cpu() && data[b].dim() == 1 && data[b].scalar_type() == at::kByte &&
                          data[b].is_contiguous(),
                      "tfrecord_parse: each of `data` must be a contiguous 1-D uint8 CPU tensor, got ",
                      data[b].sizes(), " ", data[b].scalar_type(), " on ", data[b].device(), " at ", b);
  const int64_t n = spans.size(0);
  const int64_t* span = spans.const_data_ptr<int64_t>();
  std::vector<const uint8_t*> records(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t buffer = span[3 * i], offset = span[3 * i + 1], length = span[3 * i + 2];
    TORCH_CHECK_VALUE(buffer >= 0 && buffer < static_cast<int64_t>(data.size()), "tfrecord_parse: span ", i,
                      " names buffer ", buffer, " of ", data.size());
    const int64_t size = data[buffer].numel();
    TORCH_CHECK_VALUE(offset >= 0 && length >= 0 && length <= size - offset, "tfrecord_parse: span ", i, " (",
                      offset, ", ", length, ") is outside its buffer (", size, " bytes)");
    records[i] = data[buffer].const_data_ptr<uint8_t>() + offset;
  }
  return records;
}

// Pass 1: walks record i (starting at records[i], of sizes[i] bytes, framing included) into
// chunks[i], counts[i] (K per record) and status[i].
void walk_records(const std::vector<const uint8_t*>& records, const int64_t* sizes, const Schema& schema,
                  int64_t grain, std::vector<std::vector<Chunk>>& chunks, int64_t* counts, int32_t* status) {
  const int64_t n = static_cast<int64_t>(records.size()), features = static_cast<int64_t>(schema.names.size());
  torchdali::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    Walker walker(schema);
    for (int64_t i = begin; i < end; ++i) {
      int64_t* count = counts + i * features;
      uint64_t payload = 0;
      if (sizes[i] >= kFraming) std::memcpy(&payload, records[i], sizeof(payload));
      status[i] = sizes[i] < kFraming || payload > static_cast<uint64_t>(sizes[i] - kFraming) ? kBadFraming : kParsed;
      try {
        if (status[i] == kParsed) walker.walk(records[i] + kHeader, records[i] + kHeader + payload, chunks[i], count);
      } catch (const Malformed&) {
        status[i] = kMalformed;
        chunks[i].clear();
      }
      if (status[i] != kParsed) std::fill(count, count + features, -1);
    }
  });
}

// Pass 2: the outputs, one per feature, filled with the chunks' values in record order.
std::vector<at::Tensor> gather_values(const std::vector<std::vector<Chunk>>& chunks, const int64_t* counts,
                                      const Schema& schema, int64_t grain) {
  const int64_t n = static_cast<int64_t>(chunks.size()), features = static_cast<int64_t>(schema.names.size());
  std::vector<int64_t> next(n * features);  // where record i's next value of feature k goes
  std::vector<at::Tensor> values(features);
  std::vector<uint8_t*> outs(features);
  std::vector<int64_t> item(features);
  for (int64_t k = 0; k < features; ++k) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) {
      next[i * features + k] = total;
      total += std::max<int64_t>(counts[i * features + k], 0);
    }
    const int64_t dtype = schema.dtypes[k];
    values[k] = at::empty({total}, dtype == kInt64 ? at::kLong : dtype == kFloat32 ? at::kFloat : at::kByte);
    outs[k] = static_cast<uint8_t*>(values[k].mutable_data_ptr());
    item[k] = values[k].element_size();
  }
  torchdali::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t* slot = next.data() + i * features;
      for (const Chunk& c : chunks[i])
        slot[c.feature] +=
            write_values(c, schema.dtypes[c.feature], outs[c.feature] + slot[c.feature] * item[c.feature]);
    }
  });
  return values;
}

std::tuple<std::vector<at::Tensor>, at::Tensor, at::Tensor> tfrecord_parse(
    const std::vector<at::Tensor>& data, const at::Tensor& spans_in, std::vector<std::string> names,
    std::vector<int64_t> dtypes) {
  TORCH_CHECK_VALUE(names.size() == dtypes.size(), "tfrecord_parse: got ", names.size(), " names and ",
                    dtypes.size(), " dtypes");
  for (int64_t d : dtypes)
    TORCH_CHECK_VALUE(d == kInt64 || d == kString || d == kFloat32, "tfrecord_parse: invalid dtype code ", d,
                      " (0: int64, 1: string, 2: float32)");
  const at::Tensor spans = spans_in.contiguous();
  const std::vector<const uint8_t*> records = record_starts(data, spans);
  const int64_t n = spans.size(0), features = static_cast<int64_t>(names.size());
  const at::Tensor sizes = spans.select(1, 2).contiguous();
  const int64_t* size = sizes.const_data_ptr<int64_t>();
  const int64_t mean_size = n ? std::accumulate(size, size + n, int64_t{0}) / n : 0;
  const int64_t grain = std::max<int64_t>(1, kMinBytesPerTask / std::max<int64_t>(1, mean_size));
  const Schema schema{std::move(names), std::move(dtypes)};
  at::Tensor counts = at::empty({n, features}, at::kLong);
  at::Tensor status = at::empty({n}, at::kInt);
  std::vector<std::vector<Chunk>> chunks(n);
  walk_records(records, size, schema, grain, chunks, counts.mutable_data_ptr<int64_t>(),
               status.mutable_data_ptr<int32_t>());
  return {gather_values(chunks, counts.const_data_ptr<int64_t>(), schema, grain), counts, status};
}

}  // namespace

TORCH_LIBRARY_IMPL(torchdali, CPU, m) {
  m.impl("tfrecord_parse", &tfrecord_parse);
}
