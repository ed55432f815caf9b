#include "app/profile_runs.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "engine/data/synthetic_dataset.h"
#include "engine/log/log.h"
#include "engine/model/block_linears.h"
#include "engine/runtime/owned_buffer.h"
#include "kernels/cpu/threads.h"

namespace ptrain::app {
namespace {

using kernels::Buf;
using kernels::DType;

// Timed runs of one op: the median of `repeats` samples after a warm-up, each ended by reading
// `sync` back (the median, not the best: a training step meets caches as they come). On a device a
// sample is as many launches back to back as fill ~2 ms, its time divided by them: a step queues its
// kernels the same way, and one launch and read-back (~20 us) would otherwise dominate a small
// kernel's time (measured on an H100: tables 3x slower than GPT-2's step before). `cold`: on the CPU
// each sample starts with the caches holding other data, as for AdamW, which streams a model's
// whole state where a step's GEMMs and elementwise ops find the tensors just written (measured on
// this 2-core machine: a hot AdamW table predicted 0.6 ms of a run's 2 ms update, a cold one 2 ms).
// Each table's worst spread between repeats goes to `spread` under the table being measured.
struct SpreadLog {
  std::string table;
  std::map<std::string, double>* spread;
};

class Timer {
 public:
  Timer(const kernels::Ops& ops, int repeats, SpreadLog& log, bool cold = false)
      : ops_(ops), repeats_(repeats), log_(log), cold_(cold) {}
  Timer cold() const { return Timer(ops_, repeats_, log_, true); }
  template <typename Run>
  double best(Buf sync, Run&& run) const {
    auto sample = [&](int launches) {
      float host = 0;
      if (cold_) evict_caches();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < launches; ++i) run();
      ops_.copy_to_host(&host, sync, kernels::dtype_size(sync.dtype));
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / launches;
    };
    const double first = sample(1);  // warm-up
    const int launches = ops_.device() == kernels::Device::Cpu
                             ? 1
                             : std::clamp(static_cast<int>(2e-3 / std::max(first, 1e-6)), 1, 64);
    std::vector<double> runs;
    for (int i = 0; i < repeats_; ++i) runs.push_back(sample(launches));
    std::sort(runs.begin(), runs.end());
    const double median = runs[static_cast<std::size_t>(repeats_ / 2)];
    if (repeats_ >= 4 && median >= kSpreadFloorS) {
      double& worst = (*log_.spread)[log_.table];
      worst = std::max(worst, runs[runs.size() - 2] / runs[1]);
    }
    return std::max(median, 1e-9);
  }

 private:
  // Writes 256 MiB, beyond any CPU's last-level cache (a device backend's caches are left alone).
  void evict_caches() const {
    if (ops_.device() != kernels::Device::Cpu) return;
    static std::vector<float> other(std::size_t{64} << 20);
    for (float& x : other) x += 1.0f;
  }

  const kernels::Ops& ops_;
  int repeats_;
  SpreadLog& log_;
  bool cold_;
};

// Device buffers, kept until the table is measured. On a device, floating-point buffers hold values
// in [-1, 1) rather than zeros: a GPU multiplying zeros draws less power and holds higher clocks than
// it does on a training step's data. (Integer buffers stay zero: they are token ids.) The CPU's
// kernels run at the same speed on any values, and its buffers stay zero-filled.
struct Buffers {
  const kernels::Ops& ops;
  std::vector<runtime::OwnedBuffer> owned;
  Buf take(std::int64_t count, DType dtype) {
    owned.emplace_back(ops, std::max<std::int64_t>(count, 1), dtype);
    const Buf buf = owned.back().at();
    if (ops.device() != kernels::Device::Cpu && dtype != DType::I32) {
      const std::vector<std::uint8_t>& values = random_values(dtype);
      const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * kernels::dtype_size(dtype);
      for (std::size_t done = 0; done < bytes;) {
        const std::size_t n = std::min(values.size(), bytes - done);
        ops.copy_to_device(Buf{static_cast<char*>(buf.ptr) + done, dtype}, values.data(), n);
        done += n;
      }
    }
    return buf;
  }

 private:
  // 64 MiB of values in [-1, 1) in the element type, made once.
  static const std::vector<std::uint8_t>& random_values(DType dtype) {
    static const auto make = [](bool bf16) {
      std::vector<std::uint8_t> bytes(std::size_t{64} << 20);
      std::uint32_t state = 12345;
      for (std::size_t i = 0; i < bytes.size(); i += bf16 ? 2 : 4) {
        state = state * 1664525u + 1013904223u;
        const float x = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
        std::uint32_t word;
        std::memcpy(&word, &x, 4);
        if (bf16)
          word >>= 16;
        std::memcpy(&bytes[i], &word, bf16 ? 2 : 4);
      }
      return bytes;
    };
    static const std::vector<std::uint8_t> f32 = make(false), bf16 = make(true);
    return dtype == DType::BF16 ? bf16 : f32;
  }
};

plan::GemmTable measure_gemm(const kernels::Ops& ops, const Timer& timer, DType dtype,
                             const std::vector<std::int64_t>& m_sizes, const std::vector<std::int64_t>& sizes) {
  plan::GemmTable g{m_sizes, sizes, sizes, {}, {}, {}};
  for (std::int64_t m : m_sizes)
    for (std::int64_t n : sizes)
      for (std::int64_t k : sizes) {
        Buffers b{ops, {}};
        const Buf in = b.take(m * k, dtype), weight = b.take(n * k, dtype), out = b.take(m * n, dtype);
        const Buf d_in = b.take(m * k, dtype), d_weight = b.take(n * k, DType::F32);
        const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
        g.forward_s.push_back(timer.best(out, [&] { ops.linear_forward(out, in, weight, Buf{}, M, N, K); }));
        g.input_grad_s.push_back(
            timer.best(d_in, [&] { ops.linear_backward(d_in, Buf{}, Buf{}, out, in, weight, M, N, K); }));
        g.weight_grad_s.push_back(
            timer.best(d_weight, [&] { ops.linear_backward(Buf{}, d_weight, Buf{}, out, in, weight, M, N, K); }));
      }
  return g;
}

// The FP8 GEMMs of a linear layer (model/block_linears.h) over codes cast once beforehand, from
// values in [-1, 1) (zeros on the CPU, whose kernels run at one speed on any values): forward E4M3 x
// E4M3 into bf16, input gradient E5M2 x E4M3 into bf16, weight gradient E5M2 x E4M3 added into f32;
// each summed as the model's are (model::kFp8ForwardSums, kFp8GradientSums).
plan::GemmTable measure_fp8_gemm(const kernels::Ops& ops, const Timer& timer, const std::vector<std::int64_t>& m_sizes,
                                 const std::vector<std::int64_t>& sizes) {
  constexpr kernels::Fp8Sums fwd = model::kFp8ForwardSums, grad = model::kFp8GradientSums;
  plan::GemmTable g{m_sizes, sizes, sizes, {}, {}, {}};
  for (std::int64_t m : m_sizes)
    for (std::int64_t n : sizes)
      for (std::int64_t k : sizes) {
        Buffers b{ops, {}};
        const Buf amax = b.take(1, DType::F32);
        ops.fill(amax, 1.0f, 1);
        // codes and transposed codes of x [rows, cols] (BF16), and their inverse scale
        auto codes = [&](std::int64_t rows, std::int64_t cols, DType format, Buf& out, Buf& out_t, Buf& inv) {
          const Buf x = b.take(rows * cols, DType::BF16);
          out = b.take(rows * cols, format), out_t = b.take(rows * cols, format), inv = b.take(1, DType::F32);
          ops.fp8_cast(out, out_t, inv, Buf{}, x, amax, rows, cols);
        };
        Buf in, in_t, in_inv, w, w_t, w_inv, dy, dy_t, dy_inv;
        codes(m, k, DType::E4M3, in, in_t, in_inv);
        codes(n, k, DType::E4M3, w, w_t, w_inv);
        codes(m, n, DType::E5M2, dy, dy_t, dy_inv);
        const Buf out = b.take(m * n, DType::BF16), d_in = b.take(m * k, DType::BF16),
                  d_weight = b.take(n * k, DType::F32);
        const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
        g.forward_s.push_back(
            timer.best(out, [&] { ops.fp8_gemm(out, in, w, in_inv, w_inv, Buf{}, M, N, K, false, fwd); }));
        g.input_grad_s.push_back(
            timer.best(d_in, [&] { ops.fp8_gemm(d_in, dy, w_t, dy_inv, w_inv, Buf{}, M, K, N, false, grad); }));
        g.weight_grad_s.push_back(timer.best(
            d_weight, [&] { ops.fp8_gemm(d_weight, dy_t, in_t, dy_inv, in_inv, Buf{}, N, K, M, true, grad); }));
      }
  return g;
}

plan::AttentionTable measure_attention(const kernels::Ops& ops, const Timer& timer, DType dtype,
                                       const std::vector<std::int64_t>& seqs, int batch, int heads, int head_dim) {
  plan::AttentionTable a;
  a.batch = batch, a.heads = heads, a.kv_heads = heads, a.head_dim = head_dim, a.seq = seqs;
  for (std::int64_t s : seqs) {
    const kernels::AttentionShape shape =
        kernels::AttentionShape::self_attention(batch, static_cast<int>(s), heads, heads, head_dim);
    Buffers b{ops, {}};
    const Buf q = b.take(shape.q_elements(), dtype), k = b.take(shape.kv_elements(), dtype),
              v = b.take(shape.kv_elements(), dtype), out = b.take(shape.q_elements(), dtype),
              lse = b.take(shape.lse_elements(), DType::F32), d_out = b.take(shape.q_elements(), dtype),
              d_q = b.take(shape.q_elements(), dtype), d_k = b.take(shape.kv_elements(), dtype),
              d_v = b.take(shape.kv_elements(), dtype);
    a.forward_s.push_back(timer.best(out, [&] { ops.attention_forward(out, lse, q, k, v, shape); }));
    a.backward_s.push_back(
        timer.best(d_q, [&] { ops.attention_backward(d_q, d_k, d_v, d_out, q, k, v, out, lse, shape); }));
  }
  return a;
}

// N token ids as a synthetic job's batch holds them: its first samples' inputs, one after another
// (any vocabulary of at least kMaxAlphabet ids gives these; real text repeats its common ids far
// more, and the GPU's embedding backward sums each id's rows serially: docs/cuda.md, "Kernels").
std::vector<std::int32_t> synthetic_token_ids(int N) {
  constexpr int kSeq = 1024;
  const data::SyntheticDataset source(kSeq, data::SyntheticDataset::kMaxAlphabet, 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(N) + kSeq), targets(kSeq);
  for (int done = 0; done < N; done += kSeq) source.read_sample(done / kSeq, ids.data() + done, targets.data());
  ids.resize(static_cast<std::size_t>(N));
  return ids;
}

// One memory-bound family at a few sizes: `run(n, forward)` on n elements of rows of 1024,
// `bytes(n)` the forward bytes the layer description counts for it.
template <typename Run>
std::vector<plan::MemoryPoint> measure_memory(const Timer& timer, const std::vector<std::int64_t>& elements,
                                              double bytes_per_element, Run&& run) {
  std::vector<plan::MemoryPoint> out;
  for (std::int64_t n : elements) {
    plan::MemoryPoint p{static_cast<double>(n) * bytes_per_element, 0, 0};
    run(n, p, timer);
    out.push_back(p);
  }
  return out;
}

// PTRAIN_DEBUG_PROFILE_NOISE's burst of load: the first point of `table` 1000x slower.
void inject_noise(plan::MeasuredProfile& p, const std::string& table) {
  constexpr double kBurst = 1000;
  const std::size_t slash = table.find('/');
  const std::string kind = table.substr(0, slash), element = table.substr(slash + 1);
  if (kind == "gemm" && p.gemm.count(element) != 0) p.gemm[element].forward_s.front() *= kBurst;
  if (kind == "attention")
    for (plan::AttentionTable& a : p.attention[element]) a.forward_s.front() *= kBurst;
  if (auto it = p.memory.find(table); it != p.memory.end()) it->second.front().forward_s *= kBurst;
}

}  // namespace

bool profile_noise_table(std::string& table) {
  const char* value = std::getenv("PTRAIN_DEBUG_PROFILE_NOISE");
  table = value == nullptr ? "" : value;
  if (table.empty()) return true;
  const std::size_t slash = table.find('/');
  const std::string kind = table.substr(0, slash), element = slash == std::string::npos ? "" : table.substr(slash + 1);
  const bool known = (kind == "gemm" && element == plan::kFp8GemmElement) ||
                     ((element == "f32" || element == "bf16") &&
                     (kind == "gemm" || kind == "attention" || kind == "norm" || kind == "layernorm" || kind == "rope" ||
                      kind == "activation" || kind == "gelu" || kind == "routing" || kind == "embedding" ||
                      kind == "loss" || (kind == "optimizer" && element == "f32")));
  if (!known)
    log::plan().error("PTRAIN_DEBUG_PROFILE_NOISE='{}': expected a table, <gemm|attention|norm|layernorm|rope|"
                      "activation|gelu|routing|embedding|loss>/<f32|bf16>, gemm/fp8 or optimizer/f32", table);
  return known;
}

MeasuredTables measure_profile(const kernels::Ops& ops, const ProfileOptions& options) {
  const bool cuda = ops.device() != kernels::Device::Cpu;
  MeasuredTables measured;
  SpreadLog spreads{"", &measured.spread};
  const Timer timer(ops, options.quick ? 5 : 7, spreads);
  // Whether to measure the table `name`; the timer's spreads go to it from here.
  auto wanted = [&](const std::string& name) {
    if (!options.only.empty() && options.only.count(name) == 0) return false;
    spreads.table = name;
    return true;
  };
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const std::vector<std::int64_t> gemm_sizes =
      cuda ? std::vector<std::int64_t>{64, 256, 1024, 4096, 8192}
           : options.quick ? std::vector<std::int64_t>{32, 256, 2048} : std::vector<std::int64_t>{32, 128, 512, 2048};
  // M is a microbatch's tokens: on a device up to 64K (GPT-2 124M's 32 x 1024; past the grid's edge
  // its throughput holds, and an H100 runs N = K = 768 at M 32768 well above its rate at 8192).
  const std::vector<std::int64_t> gemm_m_sizes =
      cuda ? std::vector<std::int64_t>{64, 256, 1024, 4096, 16384, 65536} : gemm_sizes;
  const std::vector<std::int64_t> seqs = cuda ? std::vector<std::int64_t>{256, 1024, 4096, 16384}
                                              : options.quick ? std::vector<std::int64_t>{64, 512}
                                                              : std::vector<std::int64_t>{64, 256, 1024};
  const std::vector<std::int64_t> elements = cuda ? std::vector<std::int64_t>{1 << 16, 1 << 22, 1 << 26}
                                                  : options.quick ? std::vector<std::int64_t>{1 << 14, 1 << 20}
                                                                  : std::vector<std::int64_t>{1 << 12, 1 << 16, 1 << 21};
  plan::MeasuredProfile& p = measured.profile;
  p.backend = cuda ? "cuda" : "cpu";
  p.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  p.threads = cuda ? 1 : p.cores;
  if (!cuda) kernels::set_cpu_threads(p.threads);
  p.quick = options.quick;
  for (const DType dtype : {DType::F32, DType::BF16}) {
    const std::string element = plan::element_name(dtype == DType::BF16);
    const int size = dtype == DType::BF16 ? 2 : 4;
    if (wanted("gemm/" + element)) {
      say("gemm " + element + ": " + std::to_string(gemm_m_sizes.size() * gemm_sizes.size() * gemm_sizes.size()) +
          " shapes, forward and both gradients");
      p.gemm[element] = measure_gemm(ops, timer, dtype, gemm_m_sizes, gemm_sizes);
    }
    // A device needs enough (sequence, head, query tile) blocks to fill it, as a training step gives
    // it (GPT-2 124M: 32 x 12): 8 sequences of 16 heads. At 1 x 4 an H100 ran the short sequences
    // on a fraction of its SMs and the table predicted GPT-2's attention 3x too slow.
    const int attention_batch = cuda ? 8 : 1, attention_heads = cuda ? 16 : 4;
    if (wanted("attention/" + element)) {
      say("attention " + element + ": " + std::to_string(seqs.size()) + " sequence lengths, head_dim 64 and 128");
      p.attention[element].clear();
      for (const int head_dim : {64, 128})
        p.attention[element].push_back(
            measure_attention(ops, timer, dtype, seqs, attention_batch, attention_heads, head_dim));
    }
    if (options.only.empty())
      say("memory-bound ops " + element + ": norms (RMSNorm, LayerNorm), RoPE, activations (SwiGLU, GELU), routing, "
          "embedding, loss");
    // One family's table at `elements`, `bytes_per_element` as the layer description counts them.
    auto memory_table = [&](const std::string& family, double bytes_per_element, const Timer& with, auto&& run) {
      if (wanted(family + "/" + element))
        p.memory[family + "/" + element] = measure_memory(with, elements, bytes_per_element, run);
    };
    constexpr int C = 1024;
    // The bytes per element each family's forward moves, as model/layer_description.cpp counts them.
    memory_table("norm", 4.0 * size, timer, [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      const int rows = static_cast<int>(n / C);
      const Buf x = b.take(n, dtype), a = b.take(n, dtype), out = b.take(n, dtype), w = b.take(C, dtype),
                rstd = b.take(rows, DType::F32), d_in = b.take(n, dtype), d_w = b.take(C, DType::F32);
      pt.forward_s = t.best(out, [&] { ops.add_rmsnorm_forward(x, out, rstd, a, out, w, rows, C, 1e-5f); });
      pt.backward_s = t.best(d_in, [&] { ops.rmsnorm_backward(d_in, d_w, out, x, w, rstd, rows, C); });
    });
    memory_table("layernorm", 4.0 * size, timer, [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      const int rows = static_cast<int>(n / C);
      const Buf x = b.take(n, dtype), a = b.take(n, dtype), out = b.take(n, dtype), w = b.take(C, dtype),
                bias = b.take(C, dtype), mean = b.take(rows, DType::F32), rstd = b.take(rows, DType::F32),
                d_in = b.take(n, dtype), d_w = b.take(C, DType::F32), d_bias = b.take(C, DType::F32);
      pt.forward_s = t.best(out, [&] { ops.add_layernorm_forward(x, out, mean, rstd, a, out, w, bias, rows, C, 1e-5f); });
      pt.backward_s = t.best(d_in, [&] { ops.layernorm_backward(d_in, d_w, d_bias, out, x, w, mean, rstd, rows, C); });
    });
    memory_table("rope", 2.0 * size, timer, [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      const Buf x = b.take(n, dtype);
      const int T = static_cast<int>(n / (8 * 128));
      pt.forward_s = t.best(x, [&] { ops.rope_forward(x, 1, T, 8, 128, 10000.0f, 0); });
      pt.backward_s = t.best(x, [&] { ops.rope_backward(x, 1, T, 8, 128, 10000.0f, 0); });
    });
    auto activation = [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      const Buf gate = b.take(n, dtype), up = b.take(n, dtype), out = b.take(n, dtype), d_gate = b.take(n, dtype),
                d_up = b.take(n, dtype);
      pt.forward_s = t.best(out, [&] { ops.swiglu_forward(out, gate, up, n); });
      pt.backward_s = t.best(d_gate, [&] { ops.swiglu_backward(d_gate, d_up, out, gate, up, n); });
    };
    memory_table("activation", 3.0 * size, timer, activation);
    // GELU as a step pays it: what it adds to the GEMM it is fused with (the up projection's forward,
    // the down projection's input gradient), per element of its input. The CPU runs the two ops one
    // after the other, so this is GELU's own time there; CUDA evaluates it in cuBLASLt's epilogue,
    // where it costs the extra write of its input (measured on an H100: timed as a separate kernel
    // it made GPT-2's step 7% slower than the run).
    memory_table("gelu", 2.0 * size, timer, [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      const int M = static_cast<int>(n / C);
      const Buf in = b.take(n, dtype), weight = b.take(std::int64_t{C} * C, dtype), bias = b.take(C, dtype),
                pre = b.take(n, dtype), out = b.take(n, dtype), d_out = b.take(n, dtype), d_pre = b.take(n, dtype);
      const double plain_forward = t.best(pre, [&] { ops.linear_forward(pre, in, weight, bias, M, C, C); });
      const double fused_forward = t.best(out, [&] { ops.linear_gelu_forward(out, pre, in, weight, bias, M, C, C); });
      const double plain_backward =
          t.best(d_pre, [&] { ops.linear_backward(d_pre, Buf{}, Buf{}, d_out, in, weight, M, C, C); });
      const double fused_backward = t.best(
          d_pre, [&] { ops.linear_backward_gelu(d_pre, Buf{}, Buf{}, d_out, in, weight, pre, M, C, C); });
      // Noise can make the fused call the faster at small sizes: GELU then costs (next to) nothing.
      pt.forward_s = std::max(fused_forward - plain_forward, 1e-9);
      pt.backward_s = std::max(fused_backward - plain_backward, 1e-9);
    });
    // Routing moves rows (dispatch, combine): measured as copies of the same bytes.
    memory_table("routing", 2.0 * size, timer, [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      const Buf from = b.take(n, dtype), to = b.take(n, dtype);
      const auto bytes = static_cast<std::size_t>(n) * static_cast<std::size_t>(size);
      pt.forward_s = t.best(to, [&] { ops.copy(to, from, bytes); });
      pt.backward_s = pt.forward_s;
    });
    // The embedding's backward sums each id's rows in one GPU block, so its time depends on how the
    // ids repeat: it reads the ids of synthetic data, as the sweep's and the benchmark's jobs feed
    // them. The zeroed ids it read before all named row 0, summed serially: 31.5 ms at 537 MB on an
    // H100 against 0.2 ms forward (a GPT-2 microbatch's took 0.14 ms), and the calibration scaled
    // every op by 0.89 to make up for it.
    memory_table("embedding", 2.0 * size, timer, [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      const int N = static_cast<int>(n / C);
      const std::vector<std::int32_t> ids = synthetic_token_ids(N);
      const std::int64_t rows = data::SyntheticDataset::kMaxAlphabet;
      const Buf out = b.take(n, dtype), tokens = b.take(N, DType::I32), table = b.take(rows * C, dtype),
                d_table = b.take(rows * C, DType::F32);
      ops.copy_to_device(tokens, ids.data(), ids.size() * sizeof(std::int32_t));
      pt.forward_s = t.best(out, [&] { ops.embedding_forward(out, tokens, table, Buf{}, N, N, C); });
      pt.backward_s = t.best(d_table, [&] { ops.embedding_backward(d_table, Buf{}, out, tokens, N, N, C); });
    });
    // AdamW over a shard: bytes counted as 4 per fp32 element of the shard (step_time.h).
    if (dtype == DType::F32)
      memory_table("optimizer", 4.0, timer.cold(), [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
        Buffers b{ops, {}};
        const Buf param = b.take(n, DType::F32), grad = b.take(n, DType::F32), m = b.take(n, DType::F32),
                  v = b.take(n, DType::F32);
        pt.forward_s = t.best(param, [&] { ops.adamw_step(param, grad, m, v, Buf{}, n, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f}); });
        pt.backward_s = pt.forward_s;
      });
    // The loss computes its gradient in forward (fused): its backward is nothing more.
    memory_table("loss", 2.0 * size, timer, [&](std::int64_t n, plan::MemoryPoint& pt, const Timer& t) {
      Buffers b{ops, {}};
      constexpr int V = 4096;
      const int N = static_cast<int>(std::max<std::int64_t>(n / V, 1));
      const Buf logits = b.take(std::int64_t{N} * V, dtype), losses = b.take(N, DType::F32),
                targets = b.take(N, DType::I32);
      pt.forward_s = t.best(losses, [&] { ops.cross_entropy_forward_backward(losses, logits, logits, targets, N, V, V, 1.0f); });
      pt.backward_s = 1e-9;
    });
  }
  // Last: a GPU's FP8 GEMMs that fail (a cuBLASLt without these kernels) leave the other tables
  // measured, and say so; without the table validate times FP8 GEMMs by the datasheet's ratio (and
  // its compute_model says "no FP8 table").
  if (options.fp8 && wanted(std::string("gemm/") + plan::kFp8GemmElement)) {
    say("gemm fp8: " + std::to_string(gemm_m_sizes.size() * gemm_sizes.size() * gemm_sizes.size()) +
        " shapes, forward and both gradients over FP8 codes");
    try {
      p.gemm[plan::kFp8GemmElement] = measure_fp8_gemm(ops, timer, gemm_m_sizes, gemm_sizes);
    } catch (const std::exception& e) {
      log::plan().warn("the FP8 GEMMs were not measured: {}", e.what());
    }
  }
  std::string noise;
  if (profile_noise_table(noise) && !noise.empty() && (options.only.empty() || options.only.count(noise) != 0))
    inject_noise(p, noise);
  return measured;
}

}  // namespace ptrain::app
