#include "trainer/data/npy.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "trainer/data/image_tensor_examples.h"
#include "trainer/data/pixels.h"
#include "trainer/data/user_data.h"

namespace elastic::trainer {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

// One value of the header's dict literal.
struct HeaderValue {
  enum class Kind { kString, kBool, kTuple, kList } kind = Kind::kString;
  std::string text;
  bool flag = false;
  std::vector<int64_t> ints;
};

// The header is a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// This parses exactly the subset np.save writes: string keys; string, bool
// and integer-tuple values (a list value is recognised only to name it).
class HeaderParser {
 public:
  HeaderParser(std::string text, std::string path) : s_(std::move(text)), path_(std::move(path)) {}

  std::map<std::string, HeaderValue> Dict() {
    std::map<std::string, HeaderValue> dict;
    Expect('{');
    while (true) {
      SkipSpace();
      if (Peek() == '}') break;
      const std::string key = String();
      Expect(':');
      if (!dict.emplace(key, Value()).second) Bad("key '" + key + "' appears twice");
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() != '}') Bad("expected ',' or '}'");
    }
    ++pos_;
    SkipSpace();
    if (pos_ != s_.size()) Bad("text after the closing '}'");
    return dict;
  }

 private:
  [[noreturn]] void Bad(const std::string& what) const {
    Fail(path_,
         "malformed .npy header (" + what + " at character " + std::to_string(pos_) + "): " + s_);
  }
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void Expect(char c) {
    SkipSpace();
    if (Peek() != c) Bad(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string String() {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"') Bad("expected a quoted string");
    const size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string::npos) Bad("unterminated string");
    std::string out = s_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return out;
  }
  int64_t Integer() {
    SkipSpace();
    const size_t start = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    // NumPy 1.x wrote Python 2 longs as "3L".
    const std::string digits = s_.substr(start, pos_ - start);
    if (Peek() == 'L') ++pos_;
    if (digits.empty() || digits.size() > 18) Bad("expected a dimension (a non-negative integer)");
    return std::stoll(digits);
  }
  HeaderValue Value() {
    SkipSpace();
    HeaderValue v;
    const char c = Peek();
    if (c == '\'' || c == '"') {
      v.kind = HeaderValue::Kind::kString;
      v.text = String();
    } else if (s_.compare(pos_, 4, "True") == 0 || s_.compare(pos_, 5, "False") == 0) {
      v.kind = HeaderValue::Kind::kBool;
      v.flag = s_[pos_] == 'T';
      pos_ += v.flag ? 4 : 5;
    } else if (c == '(') {
      v.kind = HeaderValue::Kind::kTuple;
      ++pos_;
      SkipSpace();
      while (Peek() != ')') {
        v.ints.push_back(Integer());
        SkipSpace();
        if (Peek() == ',') {
          ++pos_;
          SkipSpace();
        } else if (Peek() != ')') {
          Bad("expected ',' or ')' in the shape");
        }
      }
      ++pos_;
    } else if (c == '[') {
      // A structured dtype's field list: skip to the matching bracket.
      v.kind = HeaderValue::Kind::kList;
      int depth = 0;
      do {
        if (Peek() == '[') ++depth;
        if (Peek() == ']') --depth;
        if (Peek() == '\0') Bad("unterminated list");
        ++pos_;
      } while (depth > 0);
    } else {
      Bad("expected a string, True, False, a tuple or a list");
    }
    return v;
  }

  std::string s_;
  std::string path_;
  size_t pos_ = 0;
};

// How a dtype's values are stored and which tensor type holds them.
struct Dtype {
  torch::ScalarType stored;  // the bytes as they are in the file
  torch::ScalarType held;    // what NpyArray::data holds
  int item_size;
};

Dtype ParseDescr(const std::string& descr, const std::string& path) {
  const char kind = descr.size() >= 2 ? descr[1] : '\0';
  if (kind == 'O') {
    Fail(path, "dtype '" + descr +
                   "' holds Python objects, not numbers; save a numeric array "
                   "(np.asarray(x, dtype=np.float32) or an integer dtype)");
  }
  if (descr.size() < 3) Fail(path, "unsupported dtype '" + descr + "'");
  const char order = descr[0];
  const std::string size_text = descr.substr(2);
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    Fail(path, "dtype '" + descr + "' has an unknown byte order '" + std::string(1, order) + "'");
  }
  int size = 0;
  if (size_text.empty() || size_text.size() > 2 ||
      !std::all_of(size_text.begin(), size_text.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    Fail(path, "unsupported dtype '" + descr + "'");
  }
  size = std::stoi(size_text);
  if (order == '>' && size > 1) {
    Fail(path, "dtype '" + descr + "' is big-endian; save it little-endian (x.astype('<" +
                   std::string(1, kind) + size_text + "'))");
  }
  static const std::map<std::string, Dtype> kKnown = {
      {"b1", {torch::kBool, torch::kBool, 1}},       {"u1", {torch::kUInt8, torch::kUInt8, 1}},
      {"i1", {torch::kInt8, torch::kInt8, 1}},       {"i2", {torch::kInt16, torch::kInt16, 2}},
      {"i4", {torch::kInt32, torch::kInt32, 4}},     {"i8", {torch::kInt64, torch::kInt64, 8}},
      {"u2", {torch::kInt16, torch::kInt32, 2}},     {"u4", {torch::kInt32, torch::kInt64, 4}},
      {"u8", {torch::kInt64, torch::kInt64, 8}},     {"f2", {torch::kHalf, torch::kHalf, 2}},
      {"f4", {torch::kFloat32, torch::kFloat32, 4}}, {"f8", {torch::kFloat64, torch::kFloat64, 8}},
  };
  const auto it = kKnown.find(descr.substr(1));
  if (it == kKnown.end()) {
    Fail(path, "unsupported dtype '" + descr +
                   "'; only booleans, integers and floating point numbers are read");
  }
  return it->second;
}

// The stored bytes as the tensor type NpyArray holds: unsigned types wider
// than a byte are reinterpreted as unsigned and widened.
torch::Tensor Widen(const torch::Tensor& stored, const std::string& descr,
                    const std::string& path) {
  const std::string type = descr.substr(1);
  const int64_t n = stored.numel();
  if (type == "u2") {
    torch::Tensor out = torch::empty(stored.sizes(), torch::kInt32);
    const auto* in = reinterpret_cast<const uint16_t*>(stored.data_ptr());
    std::copy(in, in + n, out.data_ptr<int32_t>());
    return out;
  }
  if (type == "u4") {
    torch::Tensor out = torch::empty(stored.sizes(), torch::kInt64);
    const auto* in = reinterpret_cast<const uint32_t*>(stored.data_ptr());
    std::copy(in, in + n, out.data_ptr<int64_t>());
    return out;
  }
  if (type == "u8") {
    const auto* in = reinterpret_cast<const uint64_t*>(stored.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      if (in[i] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        Fail(path, "value " + std::to_string(in[i]) + " at flat index " + std::to_string(i) +
                       " does not fit in int64");
      }
    }
  }
  return stored;
}

}  // namespace

std::string NpyShapeString(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

MappedNpy::MappedNpy(const std::string& path) : file_(path) {
  const uint8_t* bytes = file_.data();
  const size_t file_size = file_.size();
  if (file_size < 10 || std::memcmp(bytes, kMagic, kMagicSize) != 0) {
    Fail(path, "not a .npy file (it does not start with \\x93NUMPY)");
  }
  const int major = bytes[6];
  const int minor = bytes[7];
  if (major < 1 || major > 3 || minor != 0) {
    Fail(path, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (1.0, 2.0 and 3.0 are read)");
  }
  // Version 1.0 has a 2-byte header length; 2.0 and 3.0 (UTF-8 header) 4 bytes; little-endian.
  uint64_t header_size = bytes[8] | static_cast<uint64_t>(bytes[9]) << 8;
  size_t offset = 10;
  if (major >= 2) {
    if (file_size < 12) Fail(path, "truncated in the header");
    header_size |= static_cast<uint64_t>(bytes[10]) << 16 | static_cast<uint64_t>(bytes[11]) << 24;
    offset = 12;
  }
  if (offset + header_size > file_size) {
    Fail(path, "truncated in the header (" + std::to_string(header_size) + " header bytes, " +
                   std::to_string(file_size - offset) + " in the file)");
  }
  std::string header(reinterpret_cast<const char*>(bytes) + offset, header_size);
  offset += header_size;
  // np.save pads the header with spaces and a newline; none of it belongs in a message.
  while (!header.empty() && std::isspace(static_cast<unsigned char>(header.back()))) {
    header.pop_back();
  }

  std::map<std::string, HeaderValue> dict = HeaderParser(header, path).Dict();
  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (dict.count(key) == 0) Fail(path, std::string("the header has no '") + key + "': " + header);
  }
  if (dict.size() != 3) Fail(path, "the header has keys besides descr, fortran_order and shape");
  const HeaderValue& descr = dict["descr"];
  const HeaderValue& fortran = dict["fortran_order"];
  const HeaderValue& shape = dict["shape"];
  if (descr.kind == HeaderValue::Kind::kList) {
    Fail(path, "structured dtypes (records with fields) are not supported");
  }
  if (descr.kind != HeaderValue::Kind::kString || fortran.kind != HeaderValue::Kind::kBool ||
      shape.kind != HeaderValue::Kind::kTuple) {
    Fail(path,
         "the header's descr must be a string, fortran_order a bool and shape a tuple: " + header);
  }
  if (fortran.flag) {
    Fail(path,
         "fortran_order is True (column-major data) and is not supported; save "
         "np.ascontiguousarray(x)");
  }
  const Dtype dtype = ParseDescr(descr.text, path);

  // The data size, checked against the file before any multiplication can overflow.
  const uint64_t data_size = file_size - offset;
  const bool empty = std::find(shape.ints.begin(), shape.ints.end(), 0) != shape.ints.end();
  uint64_t expected = empty ? 0 : static_cast<uint64_t>(dtype.item_size);
  bool too_big = false;
  for (int64_t d : shape.ints) {
    if (empty) break;
    if (expected > data_size / static_cast<uint64_t>(d)) {
      too_big = true;
      break;
    }
    expected *= static_cast<uint64_t>(d);
  }
  if (too_big || expected > data_size) {
    Fail(path, "truncated: shape " + NpyShapeString(shape.ints) + " of '" + descr.text +
                   "' needs more than the " + std::to_string(data_size) +
                   " bytes of data in the file");
  }
  if (expected < data_size) {
    Fail(path, std::to_string(data_size - expected) + " bytes after the data of shape " +
                   NpyShapeString(shape.ints) + " of '" + descr.text +
                   "' (not a single .npy array)");
  }
  descr_ = descr.text;
  shape_ = shape.ints;
  stored_ = dtype.stored;
  data_offset_ = offset;
}

NpyArray MappedNpy::Read() const {
  torch::Tensor stored = torch::empty(shape_, stored_);
  if (data_bytes() > 0) std::memcpy(stored.data_ptr(), data(), data_bytes());
  NpyArray array;
  array.descr = descr_;
  array.shape = shape_;
  array.data = Widen(stored, descr_, path());
  return array;
}

NpyArray ReadNpy(const std::string& path) { return MappedNpy(path).Read(); }

namespace {

// The images of one split, read in place from the mapped file. The channel
// dimension of a 4-d array is whichever of dimensions 1 and 3 is in 1..4
// (gray, gray+alpha, RGB, RGBA); when both or neither are, there is no safe
// guess and it is an error. An (N, H, W, C) array stays as it is: each image
// is transposed when a batch is built (ImageTensorExamples::Get).
ImageArray ImagesOf(std::shared_ptr<const MappedNpy> npy) {
  const std::string& path = npy->path();
  const auto type = npy->stored_type();
  if (type != torch::kUInt8 && type != torch::kFloat32) {
    Fail(path, "images must be uint8 or float32, got '" + npy->descr() +
                   "'; convert them (x.astype(np.float32) or x.astype(np.uint8))");
  }
  const std::vector<int64_t>& s = npy->shape();
  const std::string shape = NpyShapeString(s);
  ImageArray images;
  images.type = type;
  images.data = npy->data();
  if (s.size() == 3) {  // (N, H, W): gray, one plane is both layouts
    images.count = s[0];
    images.channels = 1;
    images.height = s[1];
    images.width = s[2];
    images.owner = std::move(npy);
    return images;
  }
  if (s.size() != 4) {
    Fail(path, "images must have shape (N, C, H, W), (N, H, W, C) or (N, H, W), got " + shape);
  }
  auto is_channels = [](int64_t d) { return d >= 1 && d <= 4; };
  if (is_channels(s[1]) && is_channels(s[3])) {
    Fail(path, "cannot tell the channel dimension of images of shape " + shape +
                   ": dimensions 1 and 3 are both in 1..4; store them as (N, C, H, W) or "
                   "(N, H, W, C) with sides above 4");
  }
  if (!is_channels(s[1]) && !is_channels(s[3])) {
    Fail(path, "images of shape " + shape +
                   " have no channel dimension: dimension 1 (N, C, H, W) or 3 (N, H, W, C) must "
                   "be 1..4");
  }
  const bool chw = is_channels(s[1]);
  images.layout = chw ? PixelLayout::kCHW : PixelLayout::kHWC;
  images.count = s[0];
  images.channels = chw ? s[1] : s[3];
  images.height = chw ? s[2] : s[1];
  images.width = chw ? s[3] : s[2];
  images.owner = std::move(npy);
  return images;
}

// "(N, C, H, W)" of the images, whatever their layout in the file.
std::string ChwShapeOf(const ImageArray& images) {
  return NpyShapeString({images.count, images.channels, images.height, images.width});
}

torch::Tensor LabelsOf(const NpyArray& array, const std::string& path) {
  const auto type = array.data.scalar_type();
  if (type == torch::kBool || type == torch::kHalf || type == torch::kFloat32 ||
      type == torch::kFloat64) {
    Fail(path, "labels must be integers, got '" + array.descr + "'; save x.astype(np.int64)");
  }
  const std::vector<int64_t>& s = array.shape;
  if (!(s.size() == 1 || (s.size() == 2 && s[1] == 1))) {
    Fail(path, "labels must have shape (N,) or (N, 1), got " + NpyShapeString(s));
  }
  return array.data.reshape({s[0]}).to(torch::kInt64).contiguous();
}

// Index and value of the first negative label, if any.
void CheckNotNegative(const torch::Tensor& labels, const std::string& path) {
  const int64_t* l = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < labels.size(0); ++i) {
    if (l[i] < 0) {
      Fail(path, "label " + std::to_string(l[i]) + " at index " + std::to_string(i) +
                     " is negative; labels are class indices 0..K-1");
    }
  }
}

struct Split {
  ImageArray images;     // in the mapped file
  torch::Tensor labels;  // int64 [N], in memory: N x 8 bytes
};

Split ReadSplit(const std::string& dir, const std::string& split) {
  const std::string x_path = dir + "/" + split + "_x.npy";
  const std::string y_path = dir + "/" + split + "_y.npy";
  Split out;
  out.images = ImagesOf(std::make_shared<const MappedNpy>(x_path));
  out.labels = LabelsOf(ReadNpy(y_path), y_path);
  if (out.images.count == 0) Fail(x_path, "holds no images (shape " + ChwShapeOf(out.images) + ")");
  if (out.images.count != out.labels.size(0)) {
    Fail(y_path, "holds " + std::to_string(out.labels.size(0)) + " labels but " + split +
                     "_x.npy holds " + std::to_string(out.images.count) + " images");
  }
  CheckNotNegative(out.labels, y_path);
  return out;
}

// Every image's pixels, read from the mapping one image at a time: the
// measurement reads the whole array once and copies none of it.
PixelNormalizer MeasureOn(const ImageArray& images, const std::string& path) {
  ChannelMoments moments(images.channels);
  std::vector<float> staging;
  for (int64_t i = 0; i < images.count; ++i) {
    if (images.type == torch::kUInt8) {
      moments.Add(images.image_bytes(i), images.layout, images.height, images.width);
    } else {
      moments.Add(images.float_image(i, &staging), images.layout, images.height, images.width);
    }
  }
  try {
    return moments.Normalizer();
  } catch (const std::invalid_argument& e) {
    Fail(path, e.what());
  }
}

}  // namespace

UserData LoadNpyData(const std::string& dir) {
  for (const char* name : {"train_x.npy", "train_y.npy", "test_x.npy", "test_y.npy"}) {
    const std::string path = dir + "/" + name;
    if (!std::filesystem::is_regular_file(path)) {
      Fail(path,
           "missing; --dataset npy reads train_x.npy, train_y.npy, test_x.npy and "
           "test_y.npy from --data-dir");
    }
  }
  Split train = ReadSplit(dir, "train");
  Split test = ReadSplit(dir, "test");
  const std::string train_x = dir + "/train_x.npy", test_x = dir + "/test_x.npy";
  const auto chw = [](const ImageArray& a) {
    return std::vector<int64_t>{a.channels, a.height, a.width};
  };
  if (test.images.type != train.images.type || chw(test.images) != chw(train.images)) {
    std::ostringstream what;
    what << "images are " << test.images.type << " " << torch::IntArrayRef(chw(test.images))
         << " (C, H, W) but train_x.npy's are " << train.images.type << " "
         << torch::IntArrayRef(chw(train.images));
    Fail(test_x, what.str());
  }

  const int64_t num_classes = train.labels.max().item<int64_t>() + 1;
  const int64_t* test_labels = test.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < test.labels.size(0); ++i) {
    if (test_labels[i] >= num_classes) {
      Fail(dir + "/test_y.npy", "label " + std::to_string(test_labels[i]) + " at index " +
                                    std::to_string(i) +
                                    " is not a class of the training split (train_y.npy "
                                    "has classes 0.." +
                                    std::to_string(num_classes - 1) + ")");
    }
  }
  // A class with no training sample is legal (the model has an output it
  // never learns) but usually a mistake in the labels: say so.
  const torch::Tensor counts = torch::bincount(train.labels, {}, num_classes);
  std::vector<int64_t> empty;
  for (int64_t k = 0; k < num_classes; ++k) {
    if (counts[k].item<int64_t>() == 0) empty.push_back(k);
  }
  if (!empty.empty()) {
    std::string list;
    for (size_t i = 0; i < empty.size() && i < 10; ++i) {
      list += (i > 0 ? ", " : "") + std::to_string(empty[i]);
    }
    if (empty.size() > 10) list += ", ...";
    std::cerr << "warning: " << dir << "/train_y.npy: " << empty.size() << " of " << num_classes
              << " classes have no training sample: " << list << "\n";
  }

  PixelNormalizer normalizer = MeasureOn(train.images, train_x);
  UserData data;
  data.channels = train.images.channels;
  data.height = train.images.height;
  data.width = train.images.width;
  for (int64_t k = 0; k < num_classes; ++k) data.class_names.push_back(std::to_string(k));
  data.pixel_scale = train.images.type == torch::kUInt8 ? 1.0f / 255 : 1.0f;
  data.mean = normalizer.mean();
  data.std = normalizer.std();
  data.train = std::make_shared<ImageTensorExamples>("npy-train", std::move(train.images),
                                                     std::move(train.labels), normalizer);
  data.test = std::make_shared<ImageTensorExamples>("npy-test", std::move(test.images),
                                                    std::move(test.labels), normalizer);
  return data;
}

}  // namespace elastic::trainer
