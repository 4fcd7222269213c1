#pragma once
// The enum-like settings of a configuration (docs/variants.md), each with its JSON
// name. Kept free of other headers so that the ops can take them too.
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace gmlp {

enum class Task { causal_lm, mlm, classify, vision };
enum class Gelu { erf, tanh };
enum class PosEmbedding { none, sinusoidal };
// s(Z): the split SGU (gMLP) and the paper's ablations; none mixes no tokens.
enum class Sgu { none, split, linear, additive, multiplicative };
enum class Spatial { full, toeplitz };
enum class Schedule { cosine, noam, constant };
// A text longer than a classifier's window: its first tokens, its first quarter and last
// three quarters of a window (head+tail), or every window of it, probabilities averaged.
enum class LongText { head, head_tail, chunks };

// The name table of each enum: its JSON names in declaration order.
template <typename E>
struct EnumNames;
template <>
struct EnumNames<Task> {
  static constexpr std::pair<Task, const char*> items[] = {
      {Task::causal_lm, "causal_lm"}, {Task::mlm, "mlm"}, {Task::classify, "classify"}, {Task::vision, "vision"}};
};
template <>
struct EnumNames<Gelu> {
  static constexpr std::pair<Gelu, const char*> items[] = {{Gelu::erf, "erf"}, {Gelu::tanh, "tanh"}};
};
template <>
struct EnumNames<PosEmbedding> {
  static constexpr std::pair<PosEmbedding, const char*> items[] = {{PosEmbedding::none, "none"},
                                                                   {PosEmbedding::sinusoidal, "sinusoidal"}};
};
template <>
struct EnumNames<Sgu> {
  static constexpr std::pair<Sgu, const char*> items[] = {{Sgu::split, "split"},
                                                          {Sgu::none, "none"},
                                                          {Sgu::linear, "linear"},
                                                          {Sgu::additive, "additive"},
                                                          {Sgu::multiplicative, "multiplicative"}};
};
template <>
struct EnumNames<Spatial> {
  static constexpr std::pair<Spatial, const char*> items[] = {{Spatial::full, "full"}, {Spatial::toeplitz, "toeplitz"}};
};
template <>
struct EnumNames<Schedule> {
  static constexpr std::pair<Schedule, const char*> items[] = {
      {Schedule::cosine, "cosine"}, {Schedule::noam, "noam"}, {Schedule::constant, "constant"}};
};

template <>
struct EnumNames<LongText> {
  static constexpr std::pair<LongText, const char*> items[] = {
      {LongText::head, "head"}, {LongText::head_tail, "head_tail"}, {LongText::chunks, "chunks"}};
};

template <typename E>
std::string name_of(E e) {
  for (const auto& [v, name] : EnumNames<E>::items)
    if (v == e) return name;
  return "?";
}

template <typename E>
std::optional<E> enum_from_name(std::string_view s) {
  for (const auto& [v, name] : EnumNames<E>::items)
    if (s == name) return v;
  return std::nullopt;
}

// "\"a\", \"b\" or \"c\"": the accepted names, for error messages.
template <typename E>
std::string enum_choices() {
  std::string out;
  const size_t n = std::size(EnumNames<E>::items);
  for (size_t i = 0; i < n; ++i)
    out += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + "\"" + EnumNames<E>::items[i].second + "\"";
  return out;
}

}  // namespace gmlp
