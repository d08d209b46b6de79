// Prepared CSF scale planes (include/moejit/csf_prepared.hpp, docs/CSF.md §8). The layouts here and in
// templates/csf_scales.cuh and templates/prepare_repack.cuh must agree byte for byte: tests/test_csf.cpp
// checks the round trip on the host, tests/gpu_test_csf.cpp the kernels' outputs.
#include "moejit/csf_prepared.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "moejit/error.hpp"
#include "reference/parallel.hpp"

namespace moejit {

namespace {
// Scale bytes a lane of row group g holds per (chunk, matrix): 2 rows x blocks per chunk.
int lane_bytes(ScaleFormat f) { return 2 * (64 / scale_block(f)); }

// One (expert, slab, matrix) of a plane: the unit of base bytes and of the offsets' matrix index.
struct Unit {
  int64_t e;
  int slab, mat;
};
int64_t unit_index(const PreparedScaleGeometry& g, const Unit& u) {
  return (u.e * g.slabs + u.slab) * g.mats + u.mat;
}
// The units of exception list `list` and the m bit their records carry.
int list_units(const PreparedScaleGeometry& g, int64_t list, Unit (&units)[2], uint32_t (&mbit)[2]) {
  if (g.mats == 2) {
    const int64_t e = list / g.slabs;
    const int slab = static_cast<int>(list % g.slabs);
    units[0] = {e, slab, 0};
    units[1] = {e, slab, 1};
    mbit[0] = 0;
    mbit[1] = 1;
    return 2;
  }
  const int per = (g.slabs + 1) / 2;
  const int64_t e = list / per;
  const int first = static_cast<int>(list % per) * 2;
  units[0] = {e, first, 0};
  units[1] = {e, first + 1, 0};
  mbit[0] = 0;
  mbit[1] = 1;
  return first + 1 < g.slabs ? 2 : 1;
}

size_t plain_index(const PreparedScaleGeometry& g, const Unit& u, int c, int grp, int i) {
  return static_cast<size_t>((((u.e * g.slabs + u.slab) * g.chunks() + c) * g.mats + u.mat) * 8 + grp) *
             lane_bytes(g.format) +
         i;
}

// The logical byte behind prepared (unit, chunk c, row group grp, byte i): 0 for padding blocks.
uint8_t logical_byte(const PreparedScaleGeometry& g, const uint8_t* logical, const Unit& u, int c, int grp, int i) {
  const int per_chunk = 64 / g.block(), nblocks = g.k / g.block();
  const int kb = c * per_chunk + i / 2;
  if (kb >= nblocks) return 0;
  const int64_t row = u.e * g.logical_rows + g.logical_row(u.mat, u.slab * 16 + grp + 8 * (i % 2));
  return logical[row * nblocks + kb];
}

const uint8_t* offsets_of(const PreparedScaleGeometry& g, const uint8_t* offsets, const Unit& u, int c) {
  return offsets + static_cast<size_t>(((u.e * g.slabs + u.slab) * g.chunks() + c) * g.mats + u.mat) *
                       prepared_csf_chunk_bytes(g.format);
}
}  // namespace

size_t PreparedScaleGeometry::plain_bytes() const {
  return static_cast<size_t>(experts) * slabs * mats * chunks() * 8 * lane_bytes(format);
}

int PreparedScaleGeometry::logical_row(int mat, int r) const {
  if (order == 2) return 2 * r + mat;
  if (order == 1) return (1 - mat) * slabs * 16 + r;
  return mat * slabs * 16 + r;
}

PreparedScaleGeometry fc1_prepared_geometry(const LayerSpec& spec) {
  const bool gated = is_gated(spec.activation);
  const int order = !gated                                             ? 0
                    : spec.gate_up_order == GateUpOrder::up_gate     ? 1
                    : spec.gate_up_order == GateUpOrder::interleaved ? 2
                                                                      : 0;
  return {spec.format, spec.experts, spec.intermediate / 16, gated ? 2 : 1, spec.hidden, spec.fc1_rows(), order};
}

PreparedScaleGeometry fc2_prepared_geometry(const LayerSpec& spec) {
  return {spec.format, spec.experts, spec.hidden / 16, 1, spec.intermediate, spec.hidden, 0};
}

int prepared_csf_chunk_bytes(ScaleFormat format) { return format == ScaleFormat::nvfp4 ? 32 : 4; }

int64_t PreparedCsfPlane::records(const PreparedScaleGeometry& g) const {
  return static_cast<int64_t>(exc.size()) - (g.lists() + 1) - g.lists() - kPreparedCsfTail;
}

PreparedCsfPlane build_prepared_csf(const PreparedScaleGeometry& g, const uint8_t* logical, int head_words) {
  if (head_words != 0 && !prepared_csf_head_words_valid(head_words))
    throw Error(fmt::format("prepared CSF scales: a list's head is 32, 64 or 128 words, not {}", head_words));
  const int chunks = g.chunks();
  if (chunks >= 0xFFFF)
    throw Error(fmt::format("prepared CSF scales: K = {} has {} chunks of 64; records hold chunk indices below 65535",
                            g.k, chunks));
  const bool nv = g.format == ScaleFormat::nvfp4;
  const int window = nv ? 16 : 2, lb = lane_bytes(g.format), cb = prepared_csf_chunk_bytes(g.format);
  const int per_chunk = 64 / g.block(), nblocks = g.k / g.block();
  const int64_t lists = g.lists();
  const int64_t units_total = static_cast<int64_t>(g.experts) * g.slabs * g.mats;
  PreparedCsfPlane p;
  p.offsets.assign(static_cast<size_t>(units_total) * chunks * cb, 0);
  p.base.assign(static_cast<size_t>(units_total) * 16, 0);
  std::vector<std::vector<uint32_t>> records(static_cast<size_t>(lists));
  const double cost = 32.0 * (256 + static_cast<double>(chunks) * per_chunk);
  detail::parallel_for(lists, detail::worker_count(lists, cost), [&](int64_t begin, int64_t end) {
    for (int64_t list = begin; list < end; ++list) {
      Unit units[2];
      uint32_t mbit[2];
      const int n = list_units(g, list, units, mbit);
      // Each of a unit's 16 rows' base: the smallest byte whose window covers the most of the row's
      // real scales (padding blocks are not the row's: they become records unless the base is 0).
      std::array<std::array<uint8_t, 16>, 2> base{};
      for (int u = 0; u < n; ++u)
        for (int grp = 0; grp < 8; ++grp)
          for (int h = 0; h < 2; ++h) {
            std::array<int, 256> count{};
            for (int kb = 0; kb < nblocks; ++kb)
              ++count[logical_byte(g, logical, units[u], kb / per_chunk, grp, 2 * (kb % per_chunk) + h)];
            std::array<int, 257> prefix{};  // prefix[v] = bytes below v
            for (int v = 0; v < 256; ++v) prefix[v + 1] = prefix[v] + count[v];
            int best = -1, best_v = 0;
            for (int v = 0; v < 256; ++v) {
              if (!count[v]) continue;
              const int covered = prefix[std::min(256, v + window)] - prefix[v];
              if (covered > best) best = covered, best_v = v;
            }
            base[u][grp * 2 + h] = static_cast<uint8_t>(best_v);
            p.base[static_cast<size_t>(unit_index(g, units[u])) * 16 + grp * 2 + h] = static_cast<uint8_t>(best_v);
          }
      std::vector<uint32_t>& rec = records[static_cast<size_t>(list)];
      for (int c = 0; c < chunks; ++c)
        for (int u = 0; u < n; ++u) {
          uint8_t* off = const_cast<uint8_t*>(offsets_of(g, p.offsets.data(), units[u], c));
          for (int grp = 0; grp < 8; ++grp)
            for (int i = 0; i < lb; ++i) {
              const int byte = logical_byte(g, logical, units[u], c, grp, i);
              const int o = byte - base[u][grp * 2 + i % 2];
              if (o < 0 || o >= window) {
                rec.push_back(static_cast<uint32_t>(c) << 16 | mbit[u] << 14 | static_cast<uint32_t>(grp) << 11 |
                              static_cast<uint32_t>(i) << 8 | static_cast<uint32_t>(byte));
                continue;  // offset 0
              }
              if (nv)
                off[4 * grp + (i & 3)] |= static_cast<uint8_t>(o << (i >= 4 ? 4 : 0));
              else
                off[(4 * grp + i) / 8] |= static_cast<uint8_t>(o << ((4 * grp + i) % 8));
            }
        }
      rec.push_back(kPreparedCsfSentinel);
    }
  });
  size_t total = static_cast<size_t>(lists) + 1 + kPreparedCsfTail;
  for (const auto& r : records) total += r.size();
  if (total > 0x7FFFFFFFull) throw Error("prepared CSF scales: more than 2^31 exception words in one plane");
  p.exc.assign(total, kPreparedCsfSentinel);
  // A list longer than its head costs the decode warp that reads it two dependent round trips (its start,
  // then its words) before its first chunk, and such a warp is where a one-wave grid's end waits; a longer
  // head costs 128 or 256 bytes per list and slab read. So the head holds the plane's longest list.
  if (head_words == 0) {
    size_t longest = 0;
    for (const auto& r : records) longest = std::max(longest, r.size());
    head_words = kPreparedCsfHeadLeast;
    while (head_words < kPreparedCsfHeadMost && longest > static_cast<size_t>(head_words)) head_words *= 2;
  }
  p.head_words = head_words;
  const size_t hw = static_cast<size_t>(head_words);
  p.head.assign(static_cast<size_t>(lists) * hw, kPreparedCsfSentinel);
  size_t at = static_cast<size_t>(lists) + 1;
  for (int64_t list = 0; list < lists; ++list) {
    p.exc[static_cast<size_t>(list)] = static_cast<uint32_t>(at);
    const std::vector<uint32_t>& r = records[static_cast<size_t>(list)];
    for (size_t j = 0; j < r.size(); ++j) {
      p.exc[at++] = r[j];
      if (j < hw) p.head[static_cast<size_t>(list) * hw + j] = r[j];
    }
  }
  p.exc[static_cast<size_t>(lists)] = static_cast<uint32_t>(at);
  return p;
}

std::vector<uint8_t> prepared_plain_scales(const PreparedScaleGeometry& g, const uint8_t* logical) {
  std::vector<uint8_t> out(g.plain_bytes());
  const int lb = lane_bytes(g.format);
  for (int64_t e = 0; e < g.experts; ++e)
    for (int slab = 0; slab < g.slabs; ++slab)
      for (int m = 0; m < g.mats; ++m)
        for (int c = 0; c < g.chunks(); ++c)
          for (int grp = 0; grp < 8; ++grp)
            for (int i = 0; i < lb; ++i) {
              const Unit u{e, slab, m};
              out[plain_index(g, u, c, grp, i)] = logical_byte(g, logical, u, c, grp, i);
            }
  return out;
}

std::vector<uint8_t> expand_prepared_csf(const PreparedScaleGeometry& g, const PreparedCsfPlane& p) {
  const bool nv = g.format == ScaleFormat::nvfp4;
  const int lb = lane_bytes(g.format), cb = prepared_csf_chunk_bytes(g.format), chunks = g.chunks();
  const int64_t lists = g.lists(), units_total = static_cast<int64_t>(g.experts) * g.slabs * g.mats;
  if (p.offsets.size() != static_cast<size_t>(units_total) * chunks * cb ||
      p.base.size() != static_cast<size_t>(units_total) * 16 || p.exc.size() < static_cast<size_t>(lists) + 1 ||
      !prepared_csf_head_words_valid(p.head_words) ||
      p.head.size() != static_cast<size_t>(lists) * p.head_words)
    throw Error("expand_prepared_csf: the plane's arrays do not have the geometry's sizes");
  std::vector<uint8_t> out(g.plain_bytes());
  for (int64_t list = 0; list < lists; ++list) {
    Unit units[2];
    uint32_t mbit[2];
    const int n = list_units(g, list, units, mbit);
    uint32_t cursor = p.exc.at(static_cast<size_t>(list));
    // The head is the list's first words, sentinel-padded; and 32 words from any of the list's words
    // stay inside the array.
    bool past = false;  // past the list's sentinel: the head holds sentinels
    for (int j = 0; j < p.head_words; ++j) {
      const uint32_t want = past ? kPreparedCsfSentinel : p.exc.at(cursor + j);
      if (p.head[static_cast<size_t>(list) * p.head_words + j] != want)
        throw Error(fmt::format("expand_prepared_csf: list {}'s head differs from its records at word {}", list, j));
      past = past || want == kPreparedCsfSentinel;
    }
    for (int c = 0; c < chunks; ++c) {
      for (int u = 0; u < n; ++u) {
        const uint8_t* off = offsets_of(g, p.offsets.data(), units[u], c);
        const size_t b = static_cast<size_t>(unit_index(g, units[u])) * 16;
        for (int grp = 0; grp < 8; ++grp) {
          // As the kernel: the lane's word, then the base pattern (rows g, g + 8 alternating) added bytewise.
          const uint32_t pair = p.base[b + 2 * grp] | static_cast<uint32_t>(p.base[b + 2 * grp + 1]) << 8;
          const uint32_t pattern = pair * 0x00010001u;
          uint32_t x, y = 0;
          if (nv) {
            const uint32_t w = off[4 * grp] | off[4 * grp + 1] << 8 | off[4 * grp + 2] << 16 |
                               static_cast<uint32_t>(off[4 * grp + 3]) << 24;
            x = (w & 0x0F0F0F0Fu) + pattern;
            y = ((w >> 4) & 0x0F0F0F0Fu) + pattern;
          } else {
            const uint32_t w = off[0] | off[1] << 8 | off[2] << 16 | static_cast<uint32_t>(off[3]) << 24;
            const uint32_t bits = (w >> (4 * grp)) & 0xFu;
            x = ((bits * 0x00204081u) & 0x01010101u) + pattern;
          }
          for (int i = 0; i < lb; ++i)
            out[plain_index(g, units[u], c, grp, i)] = static_cast<uint8_t>((i < 4 ? x : y) >> (8 * (i & 3)));
        }
      }
      // The chunk's records (the kernel's lanes apply those of their row group and matrix).
      for (;;) {
        const uint32_t r = p.exc.at(cursor);
        if ((r >> 16) != static_cast<uint32_t>(c)) break;
        const uint32_t m = (r >> 14) & 1u;
        if (static_cast<int>(m) >= n) throw Error(fmt::format("expand_prepared_csf: list {} names a missing slab", list));
        out[plain_index(g, units[m], c, static_cast<int>((r >> 11) & 7u), static_cast<int>((r >> 8) & 7u))] =
            static_cast<uint8_t>(r & 0xFFu);
        ++cursor;
      }
    }
    if (p.exc.at(cursor) != kPreparedCsfSentinel)
      throw Error(fmt::format("expand_prepared_csf: list {} has a record out of chunk order", list));
    if (p.exc.size() < cursor + static_cast<size_t>(kPreparedCsfTail))
      throw Error(fmt::format("expand_prepared_csf: list {}'s last 32 words run past the array", list));
  }
  return out;
}

}  // namespace moejit
