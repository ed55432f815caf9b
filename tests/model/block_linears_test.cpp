// BlockLinears: the op set's linear ops unchanged under bf16; under fp8 the same ops over operands
// fp8_round put on the grid (E4M3 inputs and weights, E5M2 output gradients, bias gradients from the
// unrounded gradient); and, on real tp ranks (threads, Gloo), a column-parallel shard computes
// exactly the one-rank layer's columns although its shard's amax lies in another binade than the
// whole weight's: the scale is the whole tensor's.
#include "engine/model/block_linears.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/bf16.h"
#include "tests/gloo_ranks.h"

namespace {

using namespace ptrain;
using kernels::Buf;
using kernels::DType;
using kernels::Fp8Format;
using Vec = std::vector<float>;

Buf buf(Vec& v) { return {v.data(), DType::F32}; }

Vec random_vec(std::size_t n, unsigned seed, float scale) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Vec v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// The scratch of one linear layer of up to `elements` values per operand (FP8 codes: a byte each).
struct Scratch {
  std::vector<std::uint8_t> input, weight, output_grad, output_grad_t;
  Vec amax = Vec(3), inv_scale = Vec(3);
  explicit Scratch(std::size_t elements)
      : input(elements), weight(elements), output_grad(elements), output_grad_t(elements) {}
  model::Fp8Scratch view() {
    return {{input.data(), DType::E4M3},  {weight.data(), DType::E4M3},        {output_grad.data(), DType::E5M2},
            buf(amax), {output_grad_t.data(), DType::E5M2}, buf(inv_scale)};
  }
};

// x rounded onto the FP8 grid under its own amax's scale (ops.h fp8_round).
Vec rounded(Vec x, Fp8Format format) {
  float amax = 0;
  const kernels::Ops& ops = kernels::cpu_ops();
  ops.abs_max({&amax, DType::F32}, buf(x), static_cast<std::int64_t>(x.size()), false);
  ops.fp8_round(buf(x), buf(x), {&amax, DType::F32}, static_cast<std::int64_t>(x.size()), format);
  return x;
}

constexpr int M = 6, N = 8, K = 16;

}  // namespace

TEST_CASE("BlockLinears passes bf16 through and runs fp8 over rounded operands", "[fp8]") {
  const kernels::Ops& ops = kernels::cpu_ops();
  Vec x = random_vec(M * K, 1, 2.0f), w = random_vec(N * K, 2, 0.1f), b = random_vec(N, 3, 0.5f);
  Vec dy = random_vec(M * N, 4, 0.01f);
  Scratch scratch(N * K);

  const model::BlockLinears bf16(ops, config::Precision::Bf16, scratch.view(), nullptr, nullptr);
  Vec out(M * N), want(M * N);
  bf16.forward(buf(out), buf(x), buf(w), buf(b), M, N, K);
  ops.linear_forward(buf(want), buf(x), buf(w), buf(b), M, N, K);
  CHECK(out == want);

  const model::BlockLinears fp8(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr);
  Vec qx = rounded(x, Fp8Format::E4M3), qw = rounded(w, Fp8Format::E4M3), qdy = rounded(dy, Fp8Format::E5M2);
  CHECK(qx != x);
  fp8.forward(buf(out), buf(x), buf(w), buf(b), M, N, K);
  ops.linear_forward(buf(want), buf(qx), buf(qw), buf(b), M, N, K);
  CHECK(out == want);

  Vec d_in(M * K), d_w(N * K, 0.5f), d_b(N, 0.25f), want_d_in(M * K), want_d_w(N * K, 0.5f), want_d_b(N, 0.25f);
  fp8.backward(buf(d_in), buf(d_w), buf(d_b), buf(dy), buf(x), buf(w), M, N, K);
  ops.linear_backward(buf(want_d_in), buf(want_d_w), Buf{}, buf(qdy), buf(qx), buf(qw), M, N, K);
  ops.linear_backward(Buf{}, Buf{}, buf(want_d_b), buf(dy), buf(x), buf(w), M, N, K);  // unrounded
  CHECK(d_in == want_d_in);
  CHECK(d_w == want_d_w);
  CHECK(d_b == want_d_b);

  Vec kept = d_in;
  fp8.input_grad_add(buf(d_in), buf(dy), buf(w), M, N, K, false);
  CHECK(d_in == kept);  // took part, added nothing
  fp8.input_grad_add(buf(d_in), buf(dy), buf(w), M, N, K);
  ops.linear_input_grad_add(buf(kept), buf(qdy), buf(qw), M, N, K);
  CHECK(d_in == kept);
}

TEST_CASE("an FP8 column-parallel shard computes the one-rank layer's columns", "[fp8]") {
  // The first half of the weight's rows (rank 0's) reaches 3, the second (rank 1's) only 2e-4: alone,
  // rank 1 would scale its shard by 2^21 where the whole weight is scaled by 2^7. Power-of-two scales
  // round every normal value alike, so the difference is in what the whole weight's scale leaves
  // below E4M3's smallest normal (2^-6): rank 1's values, there with 2^-9 steps.
  Vec x = random_vec(M * K, 5, 1.0f), w = random_vec(N * K, 6, 0.2f);
  w[3] = 3.0f;
  for (int i = (N / 2) * K; i < N * K; ++i) w[static_cast<std::size_t>(i)] *= 1e-3f;
  Vec want(M * N);
  {
    Scratch scratch(N * K);
    const model::BlockLinears one(kernels::cpu_ops(), config::Precision::Fp8, scratch.view(), nullptr, nullptr);
    one.forward(buf(want), buf(x), buf(w), Buf{}, M, N, K);
  }
  test::run_gloo_ranks(2, [&](dist::Comm& comm) {
    const dist::Group& group = comm.new_group("tp", {0, 1});
    parallel::TensorParallel tp(comm, kernels::cpu_ops(), group, nullptr);
    const int r = comm.rank();
    Vec shard(w.begin() + r * (N / 2) * K, w.begin() + (r + 1) * (N / 2) * K), in = x;
    Scratch scratch(N * K);
    const model::BlockLinears linears(kernels::cpu_ops(), config::Precision::Fp8, scratch.view(), &tp, nullptr);
    Vec out(M * N / 2);
    linears.forward(buf(out), buf(in), buf(shard), Buf{}, M, N / 2, K);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N / 2; ++n) CHECK(out[m * (N / 2) + n] == want[m * N + r * (N / 2) + n]);
  });
}

TEST_CASE("BlockLinears' fp8 GELU layers in bf16: the linear GELU ops over rounded operands, bit for bit",
          "[fp8]") {
  // GPT-2's MLP as training runs it: bf16 activations and weights, an f32 weight gradient.
  using Bits = std::vector<std::uint16_t>;
  auto to_bf16 = [](const Vec& v) {
    Bits b(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) b[i] = kernels::f32_to_bf16(v[i]);
    return b;
  };
  auto view = [](Bits& b) { return Buf{b.data(), DType::BF16}; };
  auto round_bf16 = [&](Bits x, Fp8Format format) {
    float amax = 0;
    const kernels::Ops& ops = kernels::cpu_ops();
    ops.abs_max({&amax, DType::F32}, view(x), static_cast<std::int64_t>(x.size()), false);
    ops.fp8_round(view(x), view(x), {&amax, DType::F32}, static_cast<std::int64_t>(x.size()), format);
    return x;
  };
  const kernels::Ops& ops = kernels::cpu_ops();
  constexpr int m = 16, n = 32, k = 64;
  Bits x = to_bf16(random_vec(m * k, 21, 2.0f)), w = to_bf16(random_vec(n * k, 22, 0.1f));
  Bits b = to_bf16(random_vec(n, 23, 0.5f)), dy = to_bf16(random_vec(m * n, 24, 0.01f));
  Bits qx = round_bf16(x, Fp8Format::E4M3), qw = round_bf16(w, Fp8Format::E4M3);
  Bits qdy = round_bf16(dy, Fp8Format::E5M2);
  Scratch scratch(n * k > m * k ? n * k : m * k);
  const model::BlockLinears fp8(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr);

  // forward: pre = x w^T + b, out = gelu(pre)   [m, n]
  Bits out(m * n), pre(m * n), want_out(m * n), want_pre(m * n);
  fp8.forward_gelu(view(out), view(pre), view(x), view(w), view(b), m, n, k);
  ops.linear_gelu_forward(view(want_out), view(want_pre), view(qx), view(qw), view(b), m, n, k);
  CHECK(pre == want_pre);
  CHECK(out == want_out);

  // backward of a layer whose input is gelu(pre2): here x stands for that input, [m, k], and pre2
  // for the GELU input kept for backward.
  Bits pre2 = to_bf16(random_vec(m * k, 25, 2.0f));
  Bits d_pre(m * k), want_d_pre(m * k);
  Vec d_w(n * k, 0.5f), want_d_w(n * k, 0.5f), d_b(n, 0.25f), want_d_b(n, 0.25f);
  fp8.backward_gelu(view(d_pre), buf(d_w), buf(d_b), view(dy), view(x), view(w), view(pre2), m, n, k);
  ops.linear_backward_gelu(view(want_d_pre), buf(want_d_w), Buf{}, view(qdy), view(qx), view(qw), view(pre2), m,
                           n, k);
  ops.linear_backward(Buf{}, Buf{}, buf(want_d_b), view(dy), view(x), view(w), m, n, k);  // unrounded
  CHECK(d_pre == want_d_pre);
  CHECK(d_w == want_d_w);
  CHECK(d_b == want_d_b);
}

TEST_CASE("linear layers that read one input cast it once and compute what each computes alone", "[fp8]") {
  // q and k of one input: forward, then the weight gradients, which read the input transposed. The
  // input is changed in place after the first layer's cast: the second reads the first's codes, so
  // its results stay those of the input as it was.
  const kernels::Ops& ops = kernels::cpu_ops();
  Vec x = random_vec(M * K, 31, 2.0f), wq = random_vec(N * K, 32, 0.1f), wk = random_vec(N * K, 33, 0.3f);
  Vec dq = random_vec(M * N, 34, 0.01f), dk = random_vec(M * N, 35, 0.02f);
  struct Results {
    Vec q = Vec(M * N), k = Vec(M * N), g_wq = Vec(N * K), g_wk = Vec(N * K);
  };
  auto run = [&](bool share, bool clobber) {
    Scratch scratch(N * K);
    Vec in = x;
    model::SharedInput forward_input, backward_input;
    auto layer = [&](model::SharedInput* shared) {
      return model::BlockLinears(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr, std::nullopt,
                                 share ? shared : nullptr);
    };
    Results r;
    layer(&forward_input).forward(buf(r.q), buf(in), buf(wq), Buf{}, M, N, K);
    if (clobber) in[7] = 1000.0f;
    layer(&forward_input).forward(buf(r.k), buf(in), buf(wk), Buf{}, M, N, K);
    in = x;
    layer(&backward_input).backward(Buf{}, buf(r.g_wq), Buf{}, buf(dq), buf(in), buf(wq), M, N, K);
    if (clobber) in[7] = 1000.0f;
    layer(&backward_input).backward(Buf{}, buf(r.g_wk), Buf{}, buf(dk), buf(in), buf(wk), M, N, K);
    return r;
  };
  const Results alone = run(false, false), shared = run(true, true), clobbered = run(false, true);
  CHECK(shared.q == alone.q);
  CHECK(shared.k == alone.k);
  CHECK(shared.g_wq == alone.g_wq);
  CHECK(shared.g_wk == alone.g_wk);
  CHECK(clobbered.k != alone.k);  // the change is seen by a layer that casts for itself
  CHECK(clobbered.g_wk != alone.g_wk);

  // Another input, or the input in the other orientation, is a caller's mistake.
  Scratch scratch(N * K);
  Vec in = x, other = x, out(M * N), g_w(N * K);
  model::SharedInput s;
  const model::BlockLinears first(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr, std::nullopt, &s);
  first.forward(buf(out), buf(in), buf(wq), Buf{}, M, N, K);
  CHECK_THROWS_AS(first.forward(buf(out), buf(other), buf(wk), Buf{}, M, N, K), std::logic_error);
  CHECK_THROWS_AS(first.backward(Buf{}, buf(g_w), Buf{}, buf(dq), buf(in), buf(wk), M, N, K), std::logic_error);
}

TEST_CASE("under delayed scaling the layers sharing an input record its amax in each one's history", "[fp8]") {
  const kernels::Ops& ops = kernels::cpu_ops();
  Vec x = random_vec(M * K, 41, 2.0f), wq = random_vec(N * K, 42, 0.1f), wk = random_vec(N * K, 43, 0.3f);
  x[5] = -6.5f;  // the input's amax
  Scratch scratch(N * K);
  model::SharedInput shared;
  for (const bool filled : {false, true}) {  // the first step scales by the current amax; later ones by the history
    Vec scale_q{1.0f, 8.0f, 1.0f}, scale_k{1.0f, 8.0f, 1.0f}, record_q(3, 0.0f), record_k(3, 0.0f), out(M * N);
    auto layer = [&](Vec& scale, Vec& record) {
      return model::BlockLinears(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr,
                                 model::BlockLinears::Delayed{{buf(scale), buf(record)}, filled}, &shared);
    };
    shared = {};
    layer(scale_q, record_q).forward(buf(out), buf(x), buf(wq), Buf{}, M, N, K);
    layer(scale_k, record_k).forward(buf(out), buf(x), buf(wk), Buf{}, M, N, K);
    CHECK(record_q[1] == 6.5f);
    CHECK(record_k[1] == 6.5f);
    CHECK(record_k[2] > record_q[2]);  // each records its own weight
  }
}

TEST_CASE("a weight's FP8 codes kept for the pass: cast at its first use, read by the later GEMMs, cast again "
          "when a pass begins", "[fp8]") {
  // Forward, input gradient and weight gradient of one layer, with the weight's codes kept and
  // without; the weight is changed in place after the first forward: the pass's later GEMMs still
  // read the codes of the weight as it was (as they would if nothing changed within a pass, which
  // is the trainer's case), and the next pass's the new ones.
  const kernels::Ops& ops = kernels::cpu_ops();
  Vec x = random_vec(M * K, 61, 2.0f), w = random_vec(N * K, 62, 0.1f), dy = random_vec(M * N, 63, 0.01f);
  struct Results {
    Vec out = Vec(M * N), d_in = Vec(M * K), d_w = Vec(N * K);
  };
  Scratch scratch(N * K);
  model::Fp8WeightCopies copies(ops);
  copies.add(3, 1, N * K);
  auto layer = [&](bool kept) {
    std::optional<model::WeightCopyAt> at;
    if (kept) at = model::WeightCopyAt{&copies, 3, 1};
    return model::BlockLinears(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr, std::nullopt, nullptr,
                               at);
  };
  auto pass = [&](bool kept, Vec& weight, bool change) {
    Results r;
    layer(kept).forward(buf(r.out), buf(x), buf(weight), Buf{}, M, N, K);
    const Vec was = weight;
    if (change) weight[2] = 0.5f;
    layer(kept).backward(buf(r.d_in), buf(r.d_w), Buf{}, buf(dy), buf(x), buf(weight), M, N, K);
    if (change) weight = was;
    return r;
  };
  Vec w_alone = w;
  const Results alone = pass(false, w_alone, false);
  copies.weights_changed();
  const Results kept = pass(true, w, true);  // the change is not seen: the codes were kept
  CHECK(kept.out == alone.out);
  CHECK(kept.d_in == alone.d_in);
  CHECK(kept.d_w == alone.d_w);
  CHECK(copies.device_bytes() == 2 * N * K + 4);  // the codes both ways, and their inverse scale

  Vec changed = w;
  changed[2] = 0.5f;
  Vec changed_alone = changed;
  const Results new_alone = pass(false, changed_alone, false);
  Results stale;
  layer(true).forward(buf(stale.out), buf(x), buf(changed), Buf{}, M, N, K);  // same pass: the old codes
  CHECK(stale.out == alone.out);
  copies.weights_changed();
  const Results next = pass(true, changed, false);
  CHECK(next.out == new_alone.out);
  CHECK(next.d_in == new_alone.d_in);
  CHECK(next.out != alone.out);
  CHECK_THROWS_AS(copies.at(3, 1, N * K + 1), std::logic_error);  // another size, or no copy added
  CHECK_THROWS_AS(copies.at(3, 2, N * K), std::logic_error);
}

TEST_CASE("under delayed scaling a kept weight's one cast records what every cast of the pass would", "[fp8]") {
  const kernels::Ops& ops = kernels::cpu_ops();
  Vec x = random_vec(M * K, 71, 2.0f), w = random_vec(N * K, 72, 0.1f), dy = random_vec(M * N, 73, 0.01f);
  w[9] = -0.75f;  // the weight's amax
  Scratch scratch(N * K);
  model::Fp8WeightCopies copies(ops);
  copies.add(0, 2, N * K);
  for (const bool filled : {false, true}) {
    Vec scale{0.02f, 4.0f, 0.5f}, record(3, 0.0f), d_in(M * K), out(M * N);
    const model::BlockLinears layer(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr,
                                    model::BlockLinears::Delayed{{buf(scale), buf(record)}, filled}, nullptr,
                                    model::WeightCopyAt{&copies, 0, 2});
    copies.weights_changed();
    layer.forward(buf(out), buf(x), buf(w), Buf{}, M, N, K);
    CHECK(record[2] == 0.75f);
    record[2] = 0.0f;  // a later use reads the codes and records nothing more
    layer.backward(buf(d_in), Buf{}, Buf{}, buf(dy), buf(x), buf(w), M, N, K);
    CHECK(record[2] == 0.0f);
  }
}

TEST_CASE("an amax known beside its tensor is read instead of taken: the same GEMMs, and a wrong one is seen",
          "[fp8]") {
  // The known amaxes are the casts' (a pass over the tensor saved): the true ones give bit for bit
  // what the casts' own passes give; a sixteenth of the input's or of the output gradient's (a scale
  // sixteen times larger: the largest values saturate) changes the results, so the cast reads what it
  // is given. (A larger amax could go unseen: a power-of-two scale moves the grid with the values.)
  const kernels::Ops& ops = kernels::cpu_ops();
  const Vec x = random_vec(M * K, 41, 2.0f), w = random_vec(N * K, 42, 0.1f), dy = random_vec(M * N, 43, 0.01f);
  float x_amax = 0, dy_amax = 0;
  ops.abs_max({&x_amax, DType::F32}, buf(const_cast<Vec&>(x)), M * K, false);
  ops.abs_max({&dy_amax, DType::F32}, buf(const_cast<Vec&>(dy)), M * N, false);
  struct Results {
    Vec out = Vec(M * N), d_in = Vec(M * K), d_w = Vec(N * K), added = Vec(M * K);
    bool operator==(const Results&) const = default;
  };
  auto run = [&](float in_amax, float d_out_amax, bool known) {
    Scratch scratch(N * K);
    Vec in = x, weight = w, grad = dy;
    Results r;
    const model::BlockLinears fp8(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr);
    const Buf in_known = known ? Buf{&in_amax, DType::F32} : Buf{};
    const Buf d_out_known = known ? Buf{&d_out_amax, DType::F32} : Buf{};
    fp8.forward(buf(r.out), buf(in), buf(weight), Buf{}, M, N, K, in_known);
    fp8.backward(buf(r.d_in), buf(r.d_w), Buf{}, buf(grad), buf(in), buf(weight), M, N, K,
                 {.in = in_known, .d_out = d_out_known});
    fp8.input_grad_add(buf(r.added), buf(grad), buf(weight), M, N, K, true, d_out_known);
    return r;
  };
  const Results taken = run(0, 0, false);
  CHECK(run(x_amax, dy_amax, true) == taken);
  const Results wrong_in = run(x_amax / 16, dy_amax, true), wrong_d_out = run(x_amax, dy_amax / 16, true);
  CHECK(wrong_in.out != taken.out);
  CHECK(wrong_in.d_w != taken.d_w);
  CHECK(wrong_in.d_in == taken.d_in);  // the input gradient reads no input
  CHECK(wrong_d_out.d_in != taken.d_in);
  CHECK(wrong_d_out.added != taken.added);
  CHECK(wrong_d_out.out == taken.out);
}

TEST_CASE("BlockLinears' GELU layers write the amaxes of GELU's output and of its gradient", "[fp8]") {
  const kernels::Ops& ops = kernels::cpu_ops();
  Vec x = random_vec(M * K, 51, 2.0f), w = random_vec(N * K, 52, 0.1f), b = random_vec(N, 53, 0.5f);
  Vec w2 = random_vec(K * N, 54, 0.1f), dy = random_vec(M * K, 55, 0.01f);
  Scratch scratch(N * K);
  const model::BlockLinears fp8(ops, config::Precision::Fp8, scratch.view(), nullptr, nullptr);
  Vec out(M * N), pre(M * N), d_pre(M * N), g_w2(K * N);
  float out_amax = -1, d_pre_amax = -1, want = 0;
  fp8.forward_gelu(buf(out), buf(pre), buf(x), buf(w), buf(b), M, N, K, Buf{}, {&out_amax, DType::F32});
  ops.abs_max({&want, DType::F32}, buf(out), M * N, false);
  CHECK(out_amax == want);
  // The next layer (N -> K) back through GELU: d_pre = gelu'(pre) * (dy w2).
  fp8.backward_gelu(buf(d_pre), buf(g_w2), Buf{}, buf(dy), buf(out), buf(w2), buf(pre), M, K, N, {},
                    {&d_pre_amax, DType::F32});
  ops.abs_max({&want, DType::F32}, buf(d_pre), M * N, false);
  CHECK(d_pre_amax == want);
  CHECK(want > 0);
}
