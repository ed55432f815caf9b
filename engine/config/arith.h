// Integer helpers for the rules: products that cannot overflow, rounding, and the lists of valid
// values that fixes suggest.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace ptrain::config {

// Product of non-negative factors, clamped at INT64_MAX: four int32 degrees can overflow int64.
std::int64_t saturating_product(std::initializer_list<std::int64_t> factors);

// Smallest multiple of `multiple` (> 0) that is >= value (>= 0), clamped at INT64_MAX.
std::int64_t round_up(std::int64_t value, std::int64_t multiple);

// "996 or 1008": the multiples of `step` (> 0) just below and above `value` (> 0), for fixes;
// only the upper one when the lower would be 0.
std::string nearby_multiples(std::int64_t value, std::int64_t step);

// Divisors of n (> 0), ascending.
std::vector<std::int64_t> divisors(std::int64_t n);

// "1, 2, 4, 8", cut to the first `max_items` with ", ...".
std::string list_numbers(const std::vector<std::int64_t>& numbers, std::size_t max_items = 12);

// "2*4*1 = 8": a product spelled out for messages.
std::string spelled_product(std::initializer_list<std::int64_t> factors);

}  // namespace ptrain::config
