#include "engine/config/arith.h"

#include <algorithm>
#include <limits>

#include "engine/config/text.h"

namespace ptrain::config {

std::int64_t saturating_product(std::initializer_list<std::int64_t> factors) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  std::int64_t product = 1;
  for (std::int64_t factor : factors) {
    if (factor == 0) return 0;
    product = product > kMax / factor ? kMax : product * factor;
  }
  return product;
}

std::int64_t round_up(std::int64_t value, std::int64_t multiple) {
  std::int64_t remainder = value % multiple;
  if (remainder == 0) return value;
  std::int64_t step = multiple - remainder;
  return value > std::numeric_limits<std::int64_t>::max() - step ? std::numeric_limits<std::int64_t>::max()
                                                                 : value + step;
}

std::string nearby_multiples(std::int64_t value, std::int64_t step) {
  std::int64_t below = value - value % step;
  std::int64_t above = round_up(value + 1, step);
  if (below == 0) return std::to_string(above);
  return cat(below, " or ", above);
}

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> small, large;
  for (std::int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d != n / d) large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

std::string list_numbers(const std::vector<std::int64_t>& numbers, std::size_t max_items) {
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < std::min(numbers.size(), max_items); ++i)
    shown.push_back(std::to_string(numbers[i]));
  if (numbers.size() > max_items) shown.emplace_back("...");
  return join(shown);
}

std::string spelled_product(std::initializer_list<std::int64_t> factors) {
  std::vector<std::string> parts;
  for (std::int64_t factor : factors) parts.push_back(std::to_string(factor));
  return cat(join(parts, "*"), " = ", saturating_product(factors));
}

}  // namespace ptrain::config
