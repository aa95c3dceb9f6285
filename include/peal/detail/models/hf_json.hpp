// JSON access for the config.json readers (hf_config.hpp): typed look-ups that name the key
// in their errors. null counts as absent, as in transformers.
#pragma once

#include <cmath>
#include <cstddef>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "../../errors.hpp"

namespace peal {
namespace detail {
namespace hf {

using json = nlohmann::json;

inline const json* find(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

inline std::optional<double> number(const json& obj, const char* key, const char* where) {
  const json* v = find(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number())
    fail(std::string("hf_config: ") + where + key + " must be a number, got " + v->dump());
  return v->get<double>();
}

inline std::optional<long long> integer(const json& obj, const char* key, const char* where) {
  const auto x = number(obj, key, where);
  if (!x) return std::nullopt;
  if (!(*x == std::floor(*x)) || std::abs(*x) > 9.0e15)
    fail(std::string("hf_config: ") + where + key + " must be an integer, got " +
         find(obj, key)->dump());
  return static_cast<long long>(*x);
}

inline std::optional<bool> boolean(const json& obj, const char* key, const char* where) {
  const json* v = find(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    fail(std::string("hf_config: ") + where + key + " must be true or false, got " + v->dump());
  return v->get<bool>();
}

// An array of at most max_entries numbers (checked before the copy is allocated).
inline std::optional<std::vector<double>> numbers(const json& obj, const char* key,
                                                  const char* where, std::size_t max_entries) {
  const json* v = find(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_array())
    fail(std::string("hf_config: ") + where + key + " must be an array of numbers");
  if (v->size() > max_entries)
    fail(std::string("hf_config: ") + where + key + " has " + std::to_string(v->size()) +
         " entries, more than " + std::to_string(max_entries) + " (preset_max_head_dim / 2)");
  std::vector<double> out;
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!e.is_number())
      fail(std::string("hf_config: ") + where + key + " must be an array of numbers, found " +
           e.dump());
    out.push_back(e.get<double>());
  }
  return out;
}

// First present key of a list; *found (if given) is set to its name.
template <class Getter>
auto first_of(const json& obj, std::initializer_list<const char*> keys, Getter get,
              const char** found = nullptr) -> decltype(get(obj, "")) {
  for (const char* k : keys)
    if (auto v = get(obj, k)) {
      if (found) *found = k;
      return v;
    }
  return {};
}

}  // namespace hf
}  // namespace detail

}  // namespace peal
