// IDX data sets (raw or gzipped), per-channel normalisation and shift augmentation.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "gmlp/error.h"
#include "gmlp/files.h"
#include "gmlp/image.h"

namespace gmlp {

namespace {

bool is_gzip(const uint8_t* p, size_t n) { return n >= 2 && p[0] == 0x1f && p[1] == 0x8b; }

// The size an IDX file declares in its header (4 + 4 * ndims bytes, then the data), or
// 0 while `have` bytes are too few to tell (or the header is not IDX: read_idx says why).
size_t idx_declared_size(const uint8_t* p, size_t have) {
  if (have < 4 || p[0] != 0 || p[1] != 0 || p[3] == 0) return 0;
  const size_t header = 4 + 4 * size_t(p[3]);
  if (have < header) return 0;
  size_t count = 1;
  for (int i = 0; i < p[3]; ++i) {
    const uint32_t d = (uint32_t(p[4 + 4 * i]) << 24) | (uint32_t(p[5 + 4 * i]) << 16) |
                       (uint32_t(p[6 + 4 * i]) << 8) | p[7 + 4 * i];
    if (__builtin_mul_overflow(count, size_t(d), &count)) return SIZE_MAX;
  }
  return header + count > header ? header + count : SIZE_MAX;
}

// Inflates every gzip member of `in` (concatenated members are legal gzip). Output past
// what the IDX header inside declares is refused as it arrives: a small gzip file must
// not unpack to gigabytes before the size check.
std::vector<uint8_t> gunzip(const std::string& path, const uint8_t* in, size_t n) {
  require(n <= UINT32_MAX, path + ": gzip file over 4 GiB is not supported");
  // Grown to what the IDX header declares once it has arrived, and no further: the set
  // keeps this vector, so no slack of a guessed or doubled size is held for the run. But
  // never past what n bytes can inflate to (deflate's limit is 1,032:1), so a header that
  // declares gigabytes in a small file reserves nothing it could not fill anyway.
  std::vector<uint8_t> out;
  const size_t most = n > SIZE_MAX / 1032 ? SIZE_MAX : n * 1032;
  z_stream zs{};
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw Error(path + ": zlib inflateInit2 failed");
  auto fail = [&](const std::string& what) {
    inflateEnd(&zs);
    throw Error(path + ": " + what);
  };
  zs.next_in = const_cast<Bytef*>(in);
  zs.avail_in = static_cast<uInt>(n);
  std::vector<uint8_t> chunk(size_t(1) << 18);
  while (true) {
    zs.next_out = chunk.data();
    zs.avail_out = static_cast<uInt>(chunk.size());
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.insert(out.end(), chunk.data(), chunk.data() + (chunk.size() - zs.avail_out));
    const size_t declared = idx_declared_size(out.data(), out.size());
    if (declared != 0 && out.capacity() < std::min(declared, most)) out.reserve(std::min(declared, most));
    if (declared != 0 && out.size() > declared)
      fail("the gzip data unpacks to more than the " + std::to_string(declared) +
           " bytes its IDX header declares");
    if (rc == Z_STREAM_END) {
      // Another member may follow; anything else after the stream is junk.
      if (zs.avail_in == 0) break;
      if (!is_gzip(zs.next_in, zs.avail_in))
        fail(std::to_string(zs.avail_in) + " bytes of trailing garbage after the gzip data");
      inflateReset(&zs);
    } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
      // All the input is in; a stream that wants more is cut short.
      if (zs.avail_out != 0 && zs.avail_in == 0)
        fail("truncated gzip data (the stream ends after " + std::to_string(n) + " bytes without its end marker)");
    } else {
      fail("corrupt gzip data (zlib: " + std::string(zs.msg ? zs.msg : "error " + std::to_string(rc)) + ")");
    }
  }
  inflateEnd(&zs);
  return out;
}

uint32_t be32(const uint8_t* p) { return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3]; }

const char* idx_type_name(int code) {
  switch (code) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "unknown";
  }
}

std::string hex2(int v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02X", v & 0xff);
  return b;
}

}  // namespace

std::vector<uint8_t> read_maybe_gzipped(const std::string& path) {
  std::vector<uint8_t> raw = read_file_bytes(path);
  if (is_gzip(raw.data(), raw.size())) return gunzip(path, raw.data(), raw.size());
  return raw;
}

IdxArray read_idx(const std::string& path) {
  std::vector<uint8_t> buf = read_maybe_gzipped(path);
  auto fail = [&](const std::string& what) { throw Error(path + ": " + what); };
  if (buf.size() < 4) fail("not an IDX file: only " + std::to_string(buf.size()) + " bytes");
  if (buf[0] != 0 || buf[1] != 0)
    fail("not an IDX file: bad magic " + hex2(buf[0]) + " " + hex2(buf[1]) + " (expected 0x00 0x00)");
  const int type = buf[2], ndims = buf[3];
  if (type != 0x08)
    fail("IDX type code " + hex2(type) + " (" + idx_type_name(type) +
         ") is not supported; expected 0x08 (unsigned byte)");
  if (ndims == 0) fail("IDX header has 0 dimensions");
  const size_t header = 4 + 4 * size_t(ndims);
  if (buf.size() < header)
    fail("truncated IDX header: " + std::to_string(ndims) + " dimensions need " + std::to_string(header) +
         " bytes, the file has " + std::to_string(buf.size()));
  IdxArray a;
  size_t count = 1;
  for (int i = 0; i < ndims; ++i) {
    const uint32_t d = be32(buf.data() + 4 + 4 * i);
    a.dims.push_back(d);
    if (d == 0) fail("IDX dimension " + std::to_string(i) + " is 0 (dims " + shape_str(a.dims) + ")");
    if (__builtin_mul_overflow(count, size_t(d), &count)) fail("IDX dims overflow");
  }
  const size_t have = buf.size() - header;
  if (have < count)
    fail("truncated IDX data: dims " + shape_str(a.dims) + " need " + std::to_string(count) + " bytes, found " +
         std::to_string(have));
  if (have > count)
    fail("IDX data longer than its dims " + shape_str(a.dims) + " say: " + std::to_string(have - count) +
         " extra bytes");
  // The header shifted out in place: a set's bytes are held once, not copied beside the file's.
  buf.erase(buf.begin(), buf.begin() + std::ptrdiff_t(header));
  a.data = std::move(buf);
  return a;
}

namespace {
// Every label in [0, n_classes) (n_classes 0: any label >= 0); returns the class count,
// the largest label + 1 when it was 0.
int check_labels(const std::vector<int32_t>& labels, int n_classes, const std::string& what) {
  int max_label = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    const int l = labels[i];
    if (l < 0 || (n_classes > 0 && l >= n_classes))
      throw Error(what + ": label " + std::to_string(l) + " at index " + std::to_string(i) + " is out of range for " +
                  (n_classes > 0 ? std::to_string(n_classes) + " classes" : std::string("class indices")));
    max_label = std::max(max_label, l);
  }
  return n_classes > 0 ? n_classes : max_label + 1;
}
}  // namespace

ImageSet load_idx(const std::string& images_path, const std::string& labels_path, int n_classes) {
  require(n_classes >= 0, "load_idx: n_classes must be >= 0, got " + std::to_string(n_classes));
  IdxArray im = read_idx(images_path);
  require(im.dims.size() == 3, images_path + ": an IDX image file must have 3 dims [n, height, width], found " +
                                   shape_str(im.dims));
  IdxArray lb = read_idx(labels_path);
  require(lb.dims.size() == 1, labels_path + ": an IDX label file must have 1 dim [n], found " + shape_str(lb.dims));
  require(im.dims[0] == lb.dims[0], labels_path + ": " + std::to_string(lb.dims[0]) + " labels but " + images_path +
                                        " holds " + std::to_string(im.dims[0]) + " images");
  require(im.dims[0] <= INT32_MAX && im.dims[1] <= 65535 && im.dims[2] <= 65535,
          images_path + ": IDX dims " + shape_str(im.dims) + " too large");
  ImageSet s;
  s.n = int(im.dims[0]);
  s.channels = 1;
  s.height = int(im.dims[1]);
  s.width = int(im.dims[2]);
  s.as_bytes = true;
  s.bytes = std::move(im.data);
  s.labels.assign(lb.data.begin(), lb.data.end());
  s.n_classes = check_labels(s.labels, n_classes, labels_path);
  return s;
}

namespace {
// make_image_set's checks of everything but the values, and the set they shape.
ImageSet shaped_set(size_t values, std::vector<int32_t> labels, int channels, int height, int width, int n_classes,
                    const std::string& what) {
  require(n_classes >= 0, what + ": n_classes must be >= 0, got " + std::to_string(n_classes));
  require(channels >= 1 && height >= 1 && width >= 1, what + ": image shape " + std::to_string(channels) + "x" +
                                                          std::to_string(height) + "x" + std::to_string(width) +
                                                          " has an empty side");
  const size_t per = size_t(channels) * size_t(height) * size_t(width);
  require(!labels.empty(), what + ": no images");
  require(labels.size() <= INT32_MAX && values == labels.size() * per,
          what + ": " + std::to_string(labels.size()) + " labels but " + std::to_string(values) + " pixel values (" +
              std::to_string(values / per) + " images of " + std::to_string(per) + ")");
  ImageSet s;
  s.n = int(labels.size());
  s.channels = channels;
  s.height = height;
  s.width = width;
  s.labels = std::move(labels);
  s.n_classes = check_labels(s.labels, n_classes, what);
  return s;
}
}  // namespace

ImageSet make_image_set(std::vector<float> pixels, std::vector<int32_t> labels, int channels, int height, int width,
                        int n_classes, const std::string& what) {
  ImageSet s = shaped_set(pixels.size(), std::move(labels), channels, height, width, n_classes, what);
  for (size_t i = 0; i < pixels.size(); ++i)
    require(std::isfinite(pixels[i]), [&] {
      return what + ": pixel value " + std::to_string(pixels[i]) + " at index " + std::to_string(i) + " is not finite";
    });
  s.pixels = std::move(pixels);
  return s;
}

ImageSet make_image_set(std::vector<uint8_t> bytes, std::vector<int32_t> labels, int channels, int height, int width,
                        int n_classes, const std::string& what) {
  ImageSet s = shaped_set(bytes.size(), std::move(labels), channels, height, width, n_classes, what);
  s.as_bytes = true;
  s.bytes = std::move(bytes);
  return s;
}

ImageSet load_image_dataset(const std::string& dir, const std::string& split, int n_classes, ImageShape shape,
                            std::vector<std::string>* class_names, bool stream) {
  namespace fs = std::filesystem;
  require(split == "train" || split == "test", "image data set split must be \"train\" or \"test\", got \"" + split + "\"");
  require(fs::is_directory(dir), dir +
                                     ": not a directory (expected an IDX data set folder, e.g. data/mnist, or a folder "
                                     "of train/ and test/ image folders)");
  auto find = [&](const std::string& stem, const std::string& kind, const std::string& idx, std::string& tried) {
    for (const char* sep : {"-", "."})
      for (const char* ext : {"", ".gz"}) {
        const std::string name = stem + "-" + kind + sep + idx + "-ubyte" + ext;
        const fs::path p = fs::path(dir) / name;
        if (fs::is_regular_file(p)) return p.string();
        tried += (tried.empty() ? "" : ", ") + name;
      }
    return std::string();
  };
  const std::string stem = split == "train" ? "train" : "t10k";
  std::string tried_images, tried_labels, others;
  const std::string images = find(stem, "images", "idx3", tried_images),
                    labels = find(stem, "labels", "idx1", tried_labels);
  // An IDX set if either split has a file of one (a missing file is then that set's
  // error, never a folder's images read beside the other split's IDX files); else an image
  // folder, <dir>/<split>/<class>/<image>.
  const std::string other = split == "train" ? "t10k" : "train";
  const bool idx_set = !images.empty() || !labels.empty() || !find(other, "images", "idx3", others).empty() ||
                       !find(other, "labels", "idx1", others).empty();
  if (idx_set) {
    require(!images.empty(), dir + ": no " + split + " images file (tried " + tried_images + ")");
    require(!labels.empty(), dir + ": no " + split + " labels file (tried " + tried_labels + ")");
    return load_idx(images, labels, n_classes);
  }
  const fs::path folder = fs::path(dir) / split;
  std::error_code ec;
  require(fs::is_directory(folder, ec), dir + ": no IDX files (tried " + tried_images + ", " + tried_labels + "), nor a " +
                                        split + "/ folder of class folders");
  std::vector<std::string> local = class_names ? *class_names : std::vector<std::string>{};
  ImageSet s = load_image_folder(folder.string(), shape, local, n_classes, stream);
  if (n_classes > 0) s.n_classes = n_classes;
  if (class_names) *class_names = std::move(local);
  return s;
}

nlohmann::json Normalization::to_json() const { return {{"mean", mean}, {"std", std}}; }

Normalization Normalization::from_json(const nlohmann::json& j, const std::string& where) {
  require(j.is_object(), where + ": normalization must be an object {\"mean\": [...], \"std\": [...]}");
  Normalization n;
  for (const auto& [key, dst] : {std::pair<const char*, std::vector<float>*>{"mean", &n.mean}, {"std", &n.std}}) {
    require(j.contains(key) && j.at(key).is_array(), where + ": normalization." + key + " must be an array of numbers");
    for (const auto& v : j.at(key)) {
      require(v.is_number(), where + ": normalization." + key + " holds a non-number: " + v.dump());
      dst->push_back(v.get<float>());
    }
  }
  for (const auto& [key, _] : j.items())
    require(key == "mean" || key == "std", where + ": unknown key normalization." + key);
  require(n.mean.size() == n.std.size(), where + ": normalization.mean has " + std::to_string(n.mean.size()) +
                                             " entries but normalization.std has " + std::to_string(n.std.size()));
  for (size_t c = 0; c < n.std.size(); ++c)
    require(std::isfinite(n.std[c]) && n.std[c] > 0 && std::isfinite(n.mean[c]),
            where + ": normalization channel " + std::to_string(c) + " needs a finite mean and std > 0, got mean " +
                std::to_string(n.mean[c]) + ", std " + std::to_string(n.std[c]));
  return n;
}

void image_sums(const ImageSet& set, int first, int count, double* sums) {
  require(first >= 0 && count >= 0 && first + count <= set.n, "image_sums: images outside the set");
  const size_t hw = size_t(set.height) * set.width, C = size_t(set.channels);
  // Each image's sums of each channel (keeps the double sums well conditioned), in
  // parallel: each its own bits on any team, held or streamed.
  auto add_image = [&](int i, const auto& value) {
    for (size_t c = 0; c < C; ++c) {
      double s1 = 0, s2 = 0;
      for (size_t k = 0; k < hw; ++k) {
        const float v = value(c * hw + k);
        s1 += v;
        s2 += double(v) * v;
      }
      sums[(size_t(i - first) * C + c) * 2] = s1;
      sums[(size_t(i - first) * C + c) * 2 + 1] = s2;
    }
  };
  if (set.streamed()) {
    // A chunk of images at a time through read_images (its errors name the file).
    const int chunk = 256;
    std::vector<uint8_t> bytes(size_t(std::min(chunk, std::max(count, 1))) * set.image_size());
    std::vector<int> which(static_cast<size_t>(chunk));
    for (int at = first; at < first + count; at += chunk) {
      const int n = std::min(chunk, first + count - at);
      for (int r = 0; r < n; ++r) which[size_t(r)] = at + r;
      read_images(set, which.data(), n, bytes.data());
#pragma omp parallel for schedule(static)
      for (int r = 0; r < n; ++r) {
        const uint8_t* b = bytes.data() + size_t(r) * set.image_size();
        add_image(at + r, [&](size_t k) { return byte_pixel(b[k]); });
      }
    }
  } else {
#pragma omp parallel for schedule(static)
    for (int i = first; i < first + count; ++i) {
      const size_t at = set.image_size() * size_t(i);
      add_image(i, [&](size_t k) { return set.value(at + k); });
    }
  }
}

Normalization normalization_of_sums(const double* sums, int n, int channels, size_t pixels_per_channel) {
  require(n > 0 && channels > 0 && pixels_per_channel > 0, "compute_normalization: the image set is empty");
  const size_t C = size_t(channels);
  Normalization norm;
  for (size_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {  // in image order: the same bits however the sums were made
      sum += sums[(size_t(i) * C + c) * 2];
      sq += sums[(size_t(i) * C + c) * 2 + 1];
    }
    const double count = double(n) * double(pixels_per_channel);
    const double mean = sum / count;
    const double var = std::max(0.0, sq / count - mean * mean);
    const double sd = std::sqrt(var);
    norm.mean.push_back(float(mean));
    norm.std.push_back(sd > 1e-12 ? float(sd) : 1.0f);
  }
  return norm;
}

Normalization compute_normalization(const ImageSet& set) {
  require(set.n > 0 && set.channels > 0 && set.height > 0 && set.width > 0,
          "compute_normalization: the image set is empty");
  std::vector<double> sums(size_t(set.n) * size_t(set.channels) * 2);
  image_sums(set, 0, set.n, sums.data());
  return normalization_of_sums(sums.data(), set.n, set.channels, size_t(set.height) * set.width);
}

void normalize(float* images, size_t count, int channels, size_t hw, const Normalization& norm) {
  if (norm.empty()) return;
  require(norm.mean.size() == size_t(channels) && norm.std.size() == size_t(channels),
          "normalization has " + std::to_string(norm.mean.size()) + " channels but the images have " +
              std::to_string(channels));
  for (size_t i = 0; i < count; ++i)
    for (int c = 0; c < channels; ++c) {
      float* p = images + (i * channels + c) * hw;
      const float m = norm.mean[c], inv = 1.0f / norm.std[c];
      for (size_t k = 0; k < hw; ++k) p[k] = (p[k] - m) * inv;
    }
}

void normalize(ImageSet& set, const Normalization& norm) {
  require(!set.as_bytes, "normalize: an image set held as bytes is normalised by the model as it reads it");
  normalize(set.pixels.data(), size_t(set.n), set.channels, size_t(set.height) * set.width, norm);
}

std::vector<float> byte_table(const Normalization& norm, int channels) {
  std::vector<float> table(size_t(channels) * 256);
  for (size_t i = 0; i < table.size(); ++i) table[i] = byte_pixel(uint8_t(i % 256));
  normalize(table.data(), 1, channels, 256, norm);
  return table;
}

namespace {
template <typename T>
void shift_pixels(const T* src, T* dst, int channels, int height, int width, int dy, int dx, T fill) {
  for (int c = 0; c < channels; ++c) {
    const T* s = src + size_t(c) * height * width;
    T* d = dst + size_t(c) * height * width;
    for (int y = 0; y < height; ++y) {
      T* row = d + size_t(y) * width;
      const int sy = y - dy;
      if (sy < 0 || sy >= height) {
        std::fill(row, row + width, fill);
        continue;
      }
      // Columns x with 0 <= x - dx < width come from the source row.
      const int x0 = std::clamp(dx, 0, width), x1 = std::clamp(width + dx, 0, width);
      std::fill(row, row + x0, fill);
      if (x1 > x0) std::memcpy(row + x0, s + size_t(sy) * width + (x0 - dx), sizeof(T) * size_t(x1 - x0));
      std::fill(row + std::max(x0, x1), row + width, fill);
    }
  }
}
}  // namespace

void shift_image(const float* src, float* dst, int channels, int height, int width, int dy, int dx, float fill) {
  shift_pixels(src, dst, channels, height, width, dy, dx, fill);
}
void shift_image(const uint8_t* src, uint8_t* dst, int channels, int height, int width, int dy, int dx, uint8_t fill) {
  shift_pixels(src, dst, channels, height, width, dy, dx, fill);
}

std::pair<int, int> draw_shift(int max_shift, Rng& rng) {
  require(max_shift >= 0, [&] { return "random_shift: max_shift must be >= 0, got " + std::to_string(max_shift); });
  if (max_shift == 0) return {0, 0};
  const uint64_t span = 2 * uint64_t(max_shift) + 1;
  const int dy = int(rng.below(span)) - max_shift;
  return {dy, int(rng.below(span)) - max_shift};
}

std::pair<int, int> random_shift(const float* src, float* dst, int channels, int height, int width, int max_shift,
                                 Rng& rng, float fill) {
  const auto [dy, dx] = draw_shift(max_shift, rng);
  shift_image(src, dst, channels, height, width, dy, dx, fill);
  return {dy, dx};
}

}  // namespace gmlp
