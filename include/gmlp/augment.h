#pragma once
// RandAugment and AutoAugment (train.auto_augment) on a training image's bytes: the
// policies as timm builds them from its config strings ("rand-m9-mstd0.5-inc1", DeiT's;
// "original", "v0", AutoAugment's ImageNet policies) and each operation as Pillow, which
// timm calls, computes it, to the byte (docs/vision.md).
#include <cstdint>
#include <string>
#include <vector>

#include "gmlp/rng.h"

namespace gmlp {

// One operation as applied, its argument what timm's level functions make of the
// magnitude drawn.
enum class AugKind : uint8_t {
  auto_contrast,
  equalize,
  invert,
  rotate,        // arg: degrees, counter-clockwise, about the centre
  posterize,     // arg: the high bits kept (8 or more: none lost)
  solarize,      // arg: the threshold; bytes at or above it inverted
  solarize_add,  // arg: added to bytes below 128, up to 255
  color,         // arg: the factor of each enhancement (1: the image as it is)
  contrast,
  brightness,
  sharpness,
  shear_x,  // arg: the shear factor
  shear_y,
  translate_x,  // arg: the shift as a share of the width (x) or height (y)
  translate_y,
};
struct AugOp {
  AugKind kind = AugKind::invert;
  double arg = 0;
  bool bicubic = false;  // the geometric operations' resampling: bicubic, else bilinear
};
// Applies one operation in place to a [C, H, W] image of bytes (C 1: Pillow's mode "L",
// 3: "RGB"), as Pillow computes it; a geometric one fills what comes from outside the
// image with fill[c].
void apply_augment(uint8_t* img, int channels, int height, int width, const AugOp& op, const uint8_t* fill);

// The resampling of the geometric operations: timm's hparams["interpolation"], or a draw
// of either for each operation (timm's default, "random").
// Pillow's Image.transform(AFFINE, m) with its bilinear or bicubic filter, which the
// geometric operations are: output pixel (x, y) samples the input at
// (m0 x' + m1 y' + m2, m3 x' + m4 y' + m5), x' = x + 0.5, y' = y + 0.5. The bicubic map
// is vectorised where the CPU has AVX2; reference: the plain per-pixel form, which the
// vectorised one must match to the byte.
void affine_transform(uint8_t* img, int channels, int height, int width, const double m[6], bool bicubic,
                      const uint8_t* fill, bool reference = false);

enum class AugInterpolation { bicubic, bilinear, random };

// A parsed train.auto_augment. RandAugment ("rand-..."): `layers` operations of
// `entries` drawn uniformly, with replacement, each applied with its probability (0.5,
// or the section p's).
// AutoAugment ("original", "originalr", "v0", "v0r", each optionally "-mstdS"): one of
// its sub-policies (consecutive pairs of entries) drawn uniformly, each of its two
// operations applied with its own probability at its own magnitude.
struct AugmentPolicy {
  struct Entry {
    uint8_t op = 0;  // index of the operation's name in timm's table
    double prob = 0.5;
    int magnitude = 10;
  };
  bool rand = false;
  int layers = 2;
  std::vector<Entry> entries;
  double magnitude_std = 0;   // > 0: each magnitude drawn normally about its own; infinite: uniformly in [0, m]
                              // (RandAugment's mstd over 100)
  double magnitude_max = 10;  // magnitudes are clipped to [0, magnitude_max]
  AugInterpolation interpolation = AugInterpolation::bicubic;

  bool empty() const { return entries.empty(); }
};
// spec "" is no policy. An Error naming train.auto_augment and what is wrong: an unknown
// policy or section, a value that is not a number, a count out of range; timm's
// experimental op weights ("w") and AugMix are not implemented.
AugmentPolicy parse_augment_policy(const std::string& spec, AugInterpolation interpolation);
AugInterpolation parse_augment_interpolation(const std::string& name);  // Error naming the key

// A row's draw (after its mirroring, before its erasing): the operations chosen, in the
// order applied, those whose probability skipped them left out.
constexpr int kMaxAugOps = 16;
struct AugmentDraw {
  int count = 0;
  AugOp ops[kMaxAugOps];
};
// RandAugment: the layers' choices (rng.below), then for each in turn: a uniform against
// its probability (none at probability 1), its magnitude's normal (or uniform) draw when
// magnitude_std > 0, a below(2) for the sign of the signed ones, a below(2) for the
// resampling of a geometric one under `random`. AutoAugment: the sub-policy (below), then
// the same for its two operations.
AugmentDraw draw_augment(const AugmentPolicy& p, Rng& rng);
// The draw's operations in turn.
void augment_image(uint8_t* img, int channels, int height, int width, const AugmentDraw& d, const uint8_t* fill);

}  // namespace gmlp
