#pragma once
// Images for the vision task: IDX data sets (MNIST, Fashion-MNIST; raw or gzipped),
// per-channel normalisation, shift augmentation, and single image files (JPEG via
// libjpeg-turbo, PNG via stb_image, PGM/PPM by our own parser) converted to a model's
// input shape.
// Every malformed input is a gmlp::Error that names the file and what is wrong.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gmlp/rng.h"

namespace gmlp {

// The value a pixel byte stands for: byte / 255, as every reader here computes it.
inline float byte_pixel(uint8_t b) { return float(b) * (1.0f / 255.0f); }

// A labelled set of images, all of one shape: floats, or (as_bytes) the bytes an IDX file
// holds, a quarter of the memory. A set of bytes is never normalised in place: the model
// normalises bytes as it reads them (Batch::image_bytes), to the same floats.
//
// An image folder may instead be streamed: its files named, not held (bytes empty), each
// image decoded from its file whenever it is used, to the bytes a held set would hold
// (read_images), so that a set larger than the machine's memory trains, and trains as it
// would held.
struct ImageSet {
  int n = 0, channels = 0, height = 0, width = 0;
  bool as_bytes = false;
  std::vector<float> pixels;     // [n, C, H, W], in [0, 1] until normalised (empty as_bytes)
  std::vector<uint8_t> bytes;    // [n, C, H, W] pixel values 0..255 (as_bytes, held)
  std::vector<int32_t> labels;   // [n], each in [0, n_classes)
  int n_classes = 0;
  // Streamed: each image's file.
  std::vector<std::string> files;

  bool streamed() const { return !files.empty(); }
  size_t image_size() const { return size_t(channels) * size_t(height) * size_t(width); }
  const float* image(int i) const { return pixels.data() + size_t(i) * image_size(); }
  float* image(int i) { return pixels.data() + size_t(i) * image_size(); }
  // A held byte set's image i (read_images reads a streamed set's).
  const uint8_t* image_bytes(int i) const { return bytes.data() + size_t(i) * image_size(); }
  // Pixel k of a held set, [0, 1] (or normalised, for a float set that was), either way.
  float value(size_t k) const { return as_bytes ? byte_pixel(bytes[k]) : pixels[k]; }
};

// Images which[0..count) of a byte set, [count, C, H, W] into out: a held set's copied, a
// streamed set's decoded from their files (in parallel on the team), each to the bytes
// load_image_folder would hold of it. An image that cannot be read is an Error naming its
// file (the first in `which` order, whatever the threads).
// crops (one a row, min_area as crop_box takes it): each row is instead its crop_box's
// part of the image resized to the set's shape (resize_box, rounded to bytes): of a held
// image, or of a streamed image's file at its own size (converted to the set's channels).
struct CropDraw;
void read_images(const ImageSet& set, const int* which, int count, uint8_t* out, const CropDraw* crops = nullptr,
                 float min_area = 0.0f);

// A whole file's bytes, gunzipped when it starts with the gzip magic (1f 8b), so either
// form of a file reads the same. Error naming the path: missing, unreadable, corrupt or
// truncated gzip data.
std::vector<uint8_t> read_maybe_gzipped(const std::string& path);

// One IDX array of unsigned bytes (type code 0x08): its dims and its data, row-major.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};
// Error naming the path: bad magic, a type code other than 0x08, no dims, zero dims,
// data shorter (truncated) or longer than the dims say.
IdxArray read_idx(const std::string& path);

// An IDX image file [n, H, W] (one channel) and its IDX label file [n] as an ImageSet
// of its bytes (as_bytes). n_classes > 0: every label must be below it; 0: n_classes is the
// largest label + 1. Errors name the file: dims of the wrong rank, counts that differ,
// a label out of range, plus everything read_idx reports.
ImageSet load_idx(const std::string& images_path, const std::string& labels_path, int n_classes = 0);
// An ImageSet from images already in memory (pixels [n, C, H, W] in [0, 1], labels [n]),
// with load_idx's label rule; Errors name `what`: sizes that disagree, an empty set,
// a label out of range.
ImageSet make_image_set(std::vector<float> pixels, std::vector<int32_t> labels, int channels, int height, int width,
                        int n_classes, const std::string& what);
// The same of bytes (pixel values 0..255), held as bytes (as_bytes).
ImageSet make_image_set(std::vector<uint8_t> bytes, std::vector<int32_t> labels, int channels, int height, int width,
                        int n_classes, const std::string& what);

// The shape images are brought to (channels 1 or 3, height, width); 0: the first image's.
struct ImageShape {
  int channels = 0, height = 0, width = 0;
};

// An image folder (torchvision's ImageFolder layout): one subfolder of `dir` per class,
// each holding PNG, JPEG, BMP, GIF, PGM or PPM files (by extension; hidden files and
// other files skipped). Every image is decoded, converted to the shape's channels and
// resized to its size (read_image, convert_channels, resize_bilinear), and held as bytes
// (a resized value rounded to the nearest byte), in class then file-name order.
// class_names: empty, it becomes the folders' names in sorted order, class i the i-th;
// given (the training split's, a model's), each folder is its name's index there. Errors
// name the folder or file: no class folders, a class folder with no images, a folder
// that is not a given class, more classes than n_classes (when > 0), all before any image
// is decoded; an image that cannot be read (the first in file order).
// stream: the set names its files rather than holding their images (ImageSet::files), and
// nothing is decoded here but the first image, when the shape needs it. Held, a set whose
// bytes would not fit in the memory free to this process is refused before decoding,
// naming the bytes it needs and train.stream_images: memory_to_hold(read_memory_report()),
// read once, when this process checks (ranks checking after others have decoded see less).
ImageSet load_image_folder(const std::string& dir, ImageShape shape, std::vector<std::string>& class_names,
                           int n_classes = 0, bool stream = false);

// What the system says of its memory, in bytes (0 where it says nothing): Linux's
// MemAvailable; the cgroup (v2) limit a container sees as its own (memory.max), its usage
// (memory.current) and the file cache within it the kernel can reclaim (memory.stat's
// inactive_file); and, in a process an MPI launcher started, the ranks it started on this
// machine (the first set of Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's
// MPI_LOCALNRANKS, Slurm's SLURM_STEP_TASKS_PER_NODE).
struct MemoryReport {
  uint64_t available = 0, cgroup_limit = 0, cgroup_used = 0, cgroup_reclaimable = 0;
  int local_ranks = 1;
};
MemoryReport read_memory_report();
// The bytes a rank may hold: the least of the system's available memory and the cgroup's
// limit less its usage (its reclaimable cache not counted as used), shared among the
// machine's ranks, each of which holds its own copy of a set; nothing where neither says.
std::optional<uint64_t> memory_to_hold(const MemoryReport& m);

// The split ("train" or "test") of an image data set in `dir`. An IDX data set, named as
// MNIST names it: {train,t10k}-images-idx3-ubyte and {train,t10k}-labels-idx1-ubyte,
// each optionally with .gz (the raw file wins when both exist; "t10k-labels.idx1-ubyte",
// as some mirrors name them, is accepted too); shape and class_names are not used. Else,
// where neither file is there, an image folder <dir>/<split> (load_image_folder, with
// shape and, where given, class_names, filled in with the folders' names when empty).
// n_classes > 0: labels must be below it. Error naming the folder and the names tried
// when neither is there.
// stream: an image folder's is streamed (load_image_folder); an IDX set is always held.
ImageSet load_image_dataset(const std::string& dir, const std::string& split, int n_classes = 0, ImageShape shape = {},
                            std::vector<std::string>* class_names = nullptr, bool stream = false);

// Per-channel normalisation x' = (x - mean[c]) / std[c], stored with a model so that
// inference applies what training applied.
struct Normalization {
  std::vector<float> mean, std;  // one per channel; both empty: identity

  bool empty() const { return mean.empty(); }
  nlohmann::json to_json() const;  // {"mean": [...], "std": [...]}
  // Error naming `where` and the key: not an object, missing or non-numeric entries,
  // lengths that differ, a std that is not > 0.
  static Normalization from_json(const nlohmann::json& j, const std::string& where);
};
// Mean and population standard deviation of each channel over every pixel of the set
// (accumulated in double, image by image in order: a streamed set, decoded once for it,
// gets a held one's bits). A constant channel gets std 1. Error on an empty set.
Normalization compute_normalization(const ImageSet& set);
// Its two halves, for a pass shared among processes: each image's sums of its values and
// their squares, channel by channel, for images [first, first + count) into sums
// [count, C, 2] (a streamed set's decoded here); and the statistics of n images' sums,
// added in image order (pixels_per_channel = H * W).
void image_sums(const ImageSet& set, int first, int count, double* sums);
Normalization normalization_of_sums(const double* sums, int n, int channels, size_t pixels_per_channel);
// In place; Error when the channel count differs from the normalisation's, or when the set
// is held as bytes (the model normalises those as it reads them).
void normalize(ImageSet& set, const Normalization& norm);
// What each byte of each channel stands for once normalised: [C, 256], entry (c, b) the
// float normalize() makes of byte_pixel(b) in channel c (so the same bits). norm empty:
// byte_pixel(b).
std::vector<float> byte_table(const Normalization& norm, int channels);
// In place on `count` images [C, H, W] (hw = H * W pixels per channel).
void normalize(float* images, size_t count, int channels, size_t hw, const Normalization& norm);

// dst[c, y, x] = src[c, y - dy, x - dx]: the content moves dy pixels down and dx right;
// pixels that come from outside the image are `fill`. src and dst must not overlap.
void shift_image(const float* src, float* dst, int channels, int height, int width, int dy, int dx,
                 float fill = 0.0f);
// The same over bytes.
void shift_image(const uint8_t* src, uint8_t* dst, int channels, int height, int width, int dy, int dx,
                 uint8_t fill = 0);
// A random shift of up to max_shift pixels in each direction: {dy, dx}, dy drawn first,
// each as rng.below(2 * max_shift + 1) - max_shift. max_shift 0: {0, 0}, drawing nothing.
std::pair<int, int> draw_shift(int max_shift, Rng& rng);
// shift_image by draw_shift's shift. Returns {dy, dx}.
std::pair<int, int> random_shift(const float* src, float* dst, int channels, int height, int width,
                                 int max_shift, Rng& rng, float fill = 0.0f);

// One image, [C, H, W] in [0, 1].
struct Image {
  int channels = 0, height = 0, width = 0;
  std::vector<float> pixels;
  float at(int c, int y, int x) const { return pixels[(size_t(c) * height + y) * width + x]; }
};

// Reads PGM (P2, P5) and PPM (P3, P6) with our parser (maxval up to 65535), JPEG with
// libjpeg-turbo as PIL does (the same bytes; a truncated file is an error), anything else
// (PNG 8/16-bit, BMP, GIF; CMYK JPEG) with stb_image. Gray stays 1 channel, colour is 3;
// an alpha channel is composited onto black (value * alpha). Error naming the path
// when it is unreadable or malformed.
Image read_image(const std::string& path);
// 1 -> 3 replicates the gray; 3 -> 1 takes the luma 0.299 R + 0.587 G + 0.114 B.
Image convert_channels(const Image& img, int channels);
// Bilinear resampling with pixel centres at +0.5 (PyTorch align_corners=False, PIL's
// BILINEAR): when shrinking, the triangle filter widens by the scale (antialiasing,
// as PIL does) so thin strokes survive. Same size returns a copy.
Image resize_bilinear(const Image& img, int height, int width);
// A random-resized crop (train.augment_crop) as torchvision's RandomResizedCrop draws it,
// drawn before the image it crops is read, when its size is not known: its ten tries'
// uniforms in [0, 1), each try's in this order: the crop's share of the image's area, its
// aspect ratio, and its place down and across the room the image leaves it. All 40 are
// drawn; torchvision stops at the first try that fits, and the tries after it are
// independent of it, so the crops are distributed as torchvision's.
constexpr int kCropTries = 10;
struct CropDraw {
  struct Try {
    float area = 0, ratio = 0, y = 0, x = 0;
  };
  Try tries[kCropTries];
};
CropDraw draw_crop(Rng& rng);
// A part of an image, in its pixels (pixel j spans [j, j + 1)).
struct CropBox {
  double x = 0, y = 0, w = 0, h = 0;
};
// The box torchvision's RandomResizedCrop.get_params makes of a draw in an image of
// width x height: the first try whose sides fit in the image, for an area share uniform
// in [min_area, 1] and an aspect ratio (width / height) log-uniform in [3/4, 4/3], the
// sides rounded half to even as Python rounds, placed at floor(u * (room + 1)) pixels
// down and across; when no try fits, the central crop of the ratio bound nearer the
// image's (or the whole image, if its ratio is within the bounds). Whole pixels.
CropBox crop_box(const CropDraw& d, float min_area, int width, int height);
// resize_bilinear of the box's part of img (the whole image's box: resize_bilinear), to
// height x width: one resampling, no copy of the part first.
Image resize_box(const Image& img, const CropBox& box, int height, int width);
// Mirrors each row of a [C, H, W] image in place.
void flip_image(uint8_t* img, int channels, int height, int width);
void flip_image(float* img, int channels, int height, int width);
// A training batch's mixing (train.mixup, train.cutmix), drawn once a batch after its
// rows' draws: rows 2i and 2i+1 are mixed with each other (an odd batch's last row with
// itself). mixup blends them, each row weight of itself and 1 - weight of its partner;
// CutMix swaps the box [y0, y1) x [x0, x1) between them, weight being the share of the
// image outside it. Either way a row's target is weight of its label and the rest of its
// partner's (Batch::mix_targets).
struct MixDraw {
  bool cut = false;
  float weight = 1.f;
  int y0 = 0, y1 = 0, x0 = 0, x1 = 0;
};
// With both alphas > 0, CutMix at even odds (one rng.below(2), 1: CutMix); then the
// weight from Beta(alpha, alpha) (Rng::beta); for CutMix the box: [c - k/2, c + k/2)
// each way for k = floor(side * sqrt(1 - weight)) (integer halves: an odd k loses a
// pixel) about a pixel c drawn down, then across, cut to the image, and the weight made
// the area outside it (timm's Mixup in its batch mode, its rand_bbox).
MixDraw draw_mix(float mixup, float cutmix, int height, int width, Rng& rng);
// Random erasing (train.random_erase; timm's RandomErasing in its 'pixel' mode, DeiT's):
// with probability p a box of a training image is replaced by standard normal noise in
// the model's (normalised) values, before the batch is mixed. Drawn after the row's
// mirroring (and its RandAugment): one uniform (below p: erased), then up to 10 tries of an area share
// uniform in [0.02, 1/3] and an aspect ratio (height / width) log-uniform in
// [0.3, 1/0.3], the sides rounded; the first box narrower and shorter than the image is
// placed by two below()s, top then left (none fits: nothing erased).
struct EraseDraw {
  bool on = false;
  int y0 = 0, x0 = 0, h = 0, w = 0;
};
EraseDraw draw_erase(float probability, int height, int width, Rng& rng);
// Fills the box of a [C, H, W] image with its noise: value k of the box (channel by
// channel, row by row) of global batch row `row`, from the batch's seed, by Box-Muller
// over a counter hash (values 2j and 2j + 1 a pair's cosine and sine), so the same on
// any number of ranks and threads.
void erase_image(float* img, int channels, int height, int width, const EraseDraw& e, uint64_t seed, int64_t row);
// read_image, then convert_channels and resize_bilinear to the wanted shape.
Image load_image(const std::string& path, int channels, int height, int width);

}  // namespace gmlp
