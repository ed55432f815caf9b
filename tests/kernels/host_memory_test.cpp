// The CPU backend's host memory (kernels/cpu/memory.cpp): zero-filled, and a large buffer aligned
// to a 2 MiB huge page and asked for transparent huge pages, which the kernel's own account of the
// mapping (/proc/self/smaps) shows.
#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels/ops.h"
#include "tests/skip.h"

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The smaps entry of the mapping that holds `address`: its flags and its huge-page kilobytes.
struct Mapping {
  bool found = false;
  std::string vm_flags;
  long anon_huge_kb = 0;
};

Mapping mapping_of(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::istringstream smaps(read_text("/proc/self/smaps"));
  Mapping m;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-' && line.find(':') > line.find(' ')) {
      if (m.found) break;  // the entry after ours
      inside = begin <= at && at < end;
      m.found = inside;
      continue;
    }
    if (!inside) continue;
    if (line.rfind("VmFlags:", 0) == 0) m.vm_flags = line.substr(8) + " ";
    if (line.rfind("AnonHugePages:", 0) == 0) m.anon_huge_kb = std::stol(line.substr(14));
  }
  return m;
}

// The kernel's count of huge-page faults that fell back to small pages (no free huge page, or
// the memory cgroup's charge failed): machine-wide, so it can only excuse a fallback, never fail one.
long fault_fallbacks() {
  std::istringstream vmstat(read_text("/proc/vmstat"));
  long total = 0;
  for (std::string name; vmstat >> name;) {
    long value = 0;
    vmstat >> value;
    if (name.rfind("thp_fault_fallback", 0) == 0) total += value;
  }
  return total;
}

}  // namespace

TEST_CASE("cpu memory: a large buffer is 2 MiB-aligned, zeroed and asked for huge pages", "[memory]") {
  const std::string setting = read_text("/sys/kernel/mm/transparent_hugepage/enabled");
  if (setting.empty())
    PTRAIN_SKIP("this kernel has no transparent huge pages (no /sys/kernel/mm/transparent_hugepage)");
  const ptrain::kernels::Ops& ops = ptrain::kernels::cpu_ops();
  const std::size_t bytes = 3 * kHugePage + 12345;
  const long fallbacks_before = fault_fallbacks();
  void* p = ops.allocate(bytes);
  const long fallbacks_after = fault_fallbacks();
  INFO("transparent_hugepage/enabled: " << setting);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % kHugePage == 0);
  const auto* bytes_at = static_cast<const unsigned char*>(p);
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < bytes; ++i) nonzero += bytes_at[i] != 0;
  CHECK(nonzero == 0);

  const Mapping m = mapping_of(p);
  REQUIRE(m.found);
  INFO("VmFlags:" << m.vm_flags << " AnonHugePages: " << m.anon_huge_kb << " kB");
  CHECK(m.vm_flags.find(" hg ") != std::string::npos);  // MADV_HUGEPAGE on the buffer's mapping
  // Under `always` or `madvise` the first touch faults in huge pages, unless the kernel had none to give.
  if (setting.find("[never]") == std::string::npos && fallbacks_after == fallbacks_before)
    CHECK(m.anon_huge_kb >= static_cast<long>(kHugePage / 1024));
  ops.release(p);
}

TEST_CASE("cpu memory: a small buffer stays 256-byte aligned and zeroed", "[memory]") {
  const ptrain::kernels::Ops& ops = ptrain::kernels::cpu_ops();
  for (const std::size_t bytes : {std::size_t{1}, std::size_t{1000}, kHugePage - 1}) {
    void* p = ops.allocate(bytes);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
    const auto* at = static_cast<const unsigned char*>(p);
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < bytes; ++i) nonzero += at[i] != 0;
    CHECK(nonzero == 0);
    ops.release(p);
  }
}
