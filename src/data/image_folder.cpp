// Image-folder data sets (<dir>/<split>/<class>/<image>, torchvision's ImageFolder
// layout): every image decoded once, converted and resized to the set's shape, and held
// as bytes, as an IDX set is; or, streamed, decoded to the same bytes whenever it is used.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>

#include "gmlp/comm.h"  // launched_by_mpi
#include "gmlp/error.h"
#include "gmlp/image.h"
#include "gmlp/tokenizer.h"  // check_class_name

namespace gmlp {

namespace {
namespace fs = std::filesystem;

bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  static const char* const kExts[] = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".pgm", ".ppm", ".pnm"};
  return std::any_of(std::begin(kExts), std::end(kExts), [&](const char* e) { return ext == e; });
}

bool hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

// The entries of a folder, each with whether it is a folder or a regular file (links
// followed). A folder that cannot be listed, or an entry whose kind cannot be told (a
// link to nowhere, a loop of links), is an Error naming it, not a filesystem exception.
struct Entry {
  fs::path path;
  bool dir, file;
};
std::vector<Entry> entries(const fs::path& dir) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  require(!ec, [&] { return dir.string() + ": cannot list: " + ec.message(); });
  std::vector<Entry> out;
  for (; it != end; it.increment(ec)) {
    require(!ec, [&] { return dir.string() + ": cannot list: " + ec.message(); });
    if (hidden(it->path())) continue;
    const fs::file_status st = fs::status(it->path(), ec);
    require(!ec, [&] { return it->path().string() + ": cannot read: " + ec.message(); });
    out.push_back({it->path(), fs::is_directory(st), fs::is_regular_file(st)});
  }
  require(!ec, [&] { return dir.string() + ": cannot list: " + ec.message(); });
  return out;
}

// A decoded image's [0, 1] values as bytes: byte / 255 came in as byte_pixel(byte), which
// rounds back to the byte; a resized value to its nearest byte, as a resize in 8 bits does
// (halves up: std::lround's rounding of these non-negative values, written so that the
// loop runs in vector lanes; truncation is floor here, and x - floor(x) is exact).
uint8_t to_byte(float v) {
  const float x = std::clamp(v, 0.0f, 1.0f) * 255.0f;
  const int r = int(x);
  return uint8_t(r + (x - float(r) >= 0.5f ? 1 : 0));
}

void put_bytes(const Image& img, uint8_t* out) {
  const float* v = img.pixels.data();
  for (size_t k = 0; k < img.pixels.size(); ++k) out[k] = to_byte(v[k]);
}

// What one image file is in a set of this shape: the one decoding of a held set's and a
// streamed set's images, so that the two train alike.
void decode_bytes(const std::string& path, const ImageSet& s, uint8_t* out) {
  put_bytes(load_image(path, s.channels, s.height, s.width), out);
}

// Image i of the set, cropped and resized to the set's shape: a held image's bytes as the
// values they stand for, or a streamed image's file at its own size.
void crop_bytes(const ImageSet& s, int i, const CropDraw& d, float min_area, uint8_t* out) {
  Image src;
  if (s.streamed()) {
    src = convert_channels(read_image(s.files[size_t(i)]), s.channels);
  } else {
    src.channels = s.channels;
    src.height = s.height;
    src.width = s.width;
    src.pixels.resize(s.image_size());
    const uint8_t* b = s.image_bytes(i);
    for (size_t k = 0; k < src.pixels.size(); ++k) src.pixels[k] = byte_pixel(b[k]);
  }
  put_bytes(resize_box(src, crop_box(d, min_area, src.width, src.height), s.height, s.width), out);
}

// The value after `key` in a file of "key value" lines, 0 when absent.
uint64_t value_in(const char* path, const std::string& key) {
  std::ifstream f(path);
  for (std::string k; f >> k;) {
    uint64_t v = 0;
    f >> v;
    if (k == key) return v;
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

std::string gigabytes(double bytes) {
  char buf[32];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
  else
    std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  return buf;
}
}  // namespace

ImageSet load_image_folder(const std::string& dir, ImageShape shape, std::vector<std::string>& class_names,
                           int n_classes, bool stream) {
  std::error_code ec;
  require(fs::is_directory(dir, ec), dir + ": not a directory (expected one subfolder of images per class)");
  std::vector<std::string> folders;
  for (const Entry& e : entries(dir))
    if (e.dir) {
      const std::string name = e.path.filename().string();  // a class name
      check_class_name(name, e.path.string() + ": the class folder's name");
      folders.push_back(name);
    }
  std::sort(folders.begin(), folders.end());
  require(!folders.empty(), dir + ": no class subfolders (expected <class>/<image> inside it)");
  // The classes: the folders in name order, or, given names (the training split's, a
  // model's), each folder's index among them.
  const bool given = !class_names.empty();
  if (!given) class_names = folders;
  require(n_classes <= 0 || class_names.size() <= size_t(n_classes), [&] {
    return dir + ": " + std::to_string(class_names.size()) + " classes, more than the model's " +
           std::to_string(n_classes);
  });
  // A model's names may repeat (ImageNet's, converted from timm, name two classes "crane"):
  // a folder of such a name cannot say which it is.
  std::map<std::string, int> index;
  std::map<std::string, std::string> repeated;  // name: the indices that bear it
  for (size_t i = 0; i < class_names.size(); ++i) {
    const auto [it, fresh] = index.emplace(class_names[i], int(i));
    if (!fresh) {
      std::string& which = repeated[class_names[i]];
      which += (which.empty() ? std::to_string(it->second) : std::string()) + ", " + std::to_string(i);
    }
  }
  std::vector<std::pair<std::string, int32_t>> files;  // path, label: in class then name order
  for (const std::string& name : folders) {
    const auto it = index.find(name);
    require(!repeated.count(name), [&] {
      return dir + ": class folder '" + name + "' names more than one of the model's classes (" + repeated[name] + ")";
    });
    require(it != index.end(), [&] {
      std::string known;
      for (const auto& n : class_names) known += (known.empty() ? "" : ", ") + n;
      return dir + ": class folder '" + name + "' is not one of the model's classes (" + known + ")";
    });
    std::vector<std::string> paths;
    for (const Entry& e : entries(fs::path(dir) / name))
      if (e.file && is_image_file(e.path)) paths.push_back(e.path.string());
    require(!paths.empty(), (fs::path(dir) / name).string() +
                                ": no images (PNG, JPEG, BMP, GIF, PGM or PPM files, by their extension)");
    std::sort(paths.begin(), paths.end());
    for (auto& p : paths) files.emplace_back(std::move(p), it->second);
  }
  require(files.size() <= size_t(INT32_MAX), dir + ": too many images");
  // The shape: what was asked, each of channels, height and width; the rest the first
  // image's (in class then name order).
  if (shape.channels == 0 || shape.height == 0 || shape.width == 0) {
    const Image first = read_image(files[0].first);
    if (shape.channels == 0) shape.channels = first.channels;
    if (shape.height == 0) shape.height = first.height;
    if (shape.width == 0) shape.width = first.width;
  }
  ImageSet s;
  s.n = int(files.size());
  s.channels = shape.channels;
  s.height = shape.height;
  s.width = shape.width;
  s.as_bytes = true;
  s.n_classes = int(class_names.size());
  s.labels.reserve(files.size());
  s.files.reserve(files.size());
  for (auto& [path, label] : files) {
    s.labels.push_back(label);
    s.files.push_back(std::move(path));
  }
  if (stream) return s;
  // Held: decoded once, every image into its own place, unless the bytes cannot fit.
  const double need = double(s.n) * double(s.image_size());
  const MemoryReport report = read_memory_report();
  const std::optional<uint64_t> room = memory_to_hold(report);
  require(!room || need <= double(*room), [&] {
    return dir + ": its " + std::to_string(s.n) + " images of " + std::to_string(s.channels) + "x" +
           std::to_string(s.height) + "x" + std::to_string(s.width) + " need " + gigabytes(need) +
           " held in memory, more than the " + gigabytes(double(*room)) + " free to this process" +
           (report.local_ranks > 1
                ? " (the machine's, shared among its " + std::to_string(report.local_ranks) + " ranks)"
                : std::string()) +
           ": stream them from their files instead, in a new run with --set train.stream_images=true (a held "
           "run cannot resume streamed)";
  });
  s.bytes.resize(size_t(s.n) * s.image_size());
  std::vector<int> all(size_t(s.n));
  for (int i = 0; i < s.n; ++i) all[size_t(i)] = i;
  read_images(s, all.data(), s.n, s.bytes.data());
  s.files.clear();
  s.files.shrink_to_fit();
  return s;
}

MemoryReport read_memory_report() {
  MemoryReport m;
  m.available = value_in("/proc/meminfo", "MemAvailable:") * 1024;
  // cgroup v2, as a container sees its own: "max" (no limit) does not read as a number.
  if ((std::ifstream("/sys/fs/cgroup/memory.max") >> m.cgroup_limit) &&
      (std::ifstream("/sys/fs/cgroup/memory.current") >> m.cgroup_used))
    m.cgroup_reclaimable = value_in("/sys/fs/cgroup/memory.stat", "inactive_file");
  else
    m.cgroup_limit = m.cgroup_used = 0;
  // Only a launched rank shares the machine, by the first count its launcher gives
  // (Slurm's "4(x2)" reads as 4).
  if (launched_by_mpi())
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_STEP_TASKS_PER_NODE"})
      if (const char* n = std::getenv(v); n && *n) {
        m.local_ranks = std::max(1, std::atoi(n));
        break;
      }
  return m;
}

std::optional<uint64_t> memory_to_hold(const MemoryReport& m) {
  std::optional<uint64_t> free;
  if (m.available > 0) free = m.available;
  if (m.cgroup_limit > 0) {
    const uint64_t used = m.cgroup_used > m.cgroup_reclaimable ? m.cgroup_used - m.cgroup_reclaimable : 0;
    const uint64_t left = m.cgroup_limit > used ? m.cgroup_limit - used : 0;
    free = free ? std::min(*free, left) : left;
  }
  if (free && m.local_ranks > 1) *free /= uint64_t(m.local_ranks);
  return free;
}

void read_images(const ImageSet& set, const int* which, int count, uint8_t* out, const CropDraw* crops,
                 float min_area) {
  require(set.as_bytes, "read_images: the image set holds floats, not bytes");
  const size_t sz = set.image_size();
  for (int r = 0; r < count; ++r)
    require(which[r] >= 0 && which[r] < set.n,
            [&] { return "read_images: image " + std::to_string(which[r]) + " of a set of " + std::to_string(set.n); });
  if (!set.streamed() && !crops) {
    for (int r = 0; r < count; ++r) std::memcpy(out + size_t(r) * sz, set.image_bytes(which[r]), sz);
    return;
  }
  // Decoded in parallel (images of one folder can differ in cost tenfold: dynamic), each
  // into its own place; the first failure in `which` order is the one reported, so the
  // error does not depend on the threads.
  std::vector<std::string> errors(static_cast<size_t>(count));
#pragma omp parallel for schedule(dynamic, 1)
  for (int r = 0; r < count; ++r) {
    const std::string path = set.streamed() ? set.files[size_t(which[r])] : "image " + std::to_string(which[r]);
    try {
      if (crops)
        crop_bytes(set, which[r], crops[r], min_area, out + size_t(r) * sz);
      else
        decode_bytes(path, set, out + size_t(r) * sz);
    } catch (const std::exception& e) {  // the readers' errors name the file; anything else gets its name
      const std::string what = e.what();
      errors[size_t(r)] = what.find(path) == std::string::npos ? path + ": " + what : what;
    }
  }
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);
}

}  // namespace gmlp
