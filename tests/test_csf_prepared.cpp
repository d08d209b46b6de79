// Prepared CSF scale planes (docs/CSF.md §8, include/moejit/csf_prepared.hpp): the layout the decode
// kernels read in place of the plain prepared scales. The host mirror of the kernels' reconstruction
// (expand_prepared_csf, the arithmetic of templates/csf_scales.cuh) must give back the plain prepared
// bytes (the repack kernel's, mirrored by prepared_plain_scales) for every geometry and every input;
// the kernel keys that read CSF must name it, generate it and compile.
#include "catch_compat.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moejit/compiler.hpp"
#include "moejit/csf_prepared.hpp"
#include "moejit/types.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/key.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"

using namespace moejit;
using Catch::Contains;

namespace {

PreparedScaleGeometry geometry(ScaleFormat f, int experts, int slabs, int mats, int k, int order = 0) {
  return PreparedScaleGeometry{f, experts, slabs, mats, k, slabs * 16 * mats, order};
}

std::vector<uint8_t> logical_plane(const PreparedScaleGeometry& g, const char* kind, uint32_t seed) {
  const size_t n = static_cast<size_t>(g.experts) * g.logical_rows * (g.k / g.block());
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) {
    const std::string k = kind;
    if (k == "random") v[i] = static_cast<uint8_t>(rng());
    else if (k == "equal") v[i] = 0x7E;
    else if (k == "narrow") v[i] = static_cast<uint8_t>(100 + rng() % (g.format == ScaleFormat::nvfp4 ? 16 : 2));
    else v[i] = static_cast<uint8_t>(100 + rng() % 3 + (rng() % 50 == 0 ? 40 : 0));  // "spread": a few exceptions
  }
  return v;
}

PreparedCsfPlane round_trip(const PreparedScaleGeometry& g, const std::vector<uint8_t>& logical) {
  const PreparedCsfPlane p = build_prepared_csf(g, logical.data());
  REQUIRE(p.exc.size() >= static_cast<size_t>(g.lists()) + 1);
  REQUIRE(expand_prepared_csf(g, p) == prepared_plain_scales(g, logical.data()));
  return p;
}

}  // namespace

TEST_CASE("prepared csf: exact round trip to the plain prepared bytes, every geometry and input", "[csf][prepared]") {
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    const int block = scale_block(f);
    // FC1 of a gated layer (each row order), FC1 of relu2 / FC2 with an odd slab count (a list with
    // one slab), K with a partial last chunk (padding blocks), K of one block.
    struct Case {
      int experts, slabs, mats, k, order;
    };
    const Case cases[] = {{2, 3, 2, 256, 0}, {2, 3, 2, 256, 1}, {2, 2, 2, 192, 2}, {3, 5, 1, 128, 0},
                          {2, 4, 1, 64 + 2 * block, 0}, {1, 2, 2, block, 0}, {2, 3, 1, 320 + block, 0}};
    for (const Case& c : cases)
      for (const char* kind : {"random", "equal", "narrow", "spread"}) {
        const PreparedScaleGeometry g = geometry(f, c.experts, c.slabs, c.mats, c.k, c.order);
        INFO(to_string(f) << " E" << c.experts << " slabs " << c.slabs << " mats " << c.mats << " K " << c.k
                          << " order " << c.order << " " << kind);
        const PreparedCsfPlane p = round_trip(g, logical_plane(g, kind, 7));
        const bool padded = c.k % 64 != 0;
        // Rows inside their window take no records: all-equal and narrow rows none, unless padding
        // blocks (code 0) fall outside a nonzero base.
        if (std::string(kind) == "equal" || std::string(kind) == "narrow") {
          if (!padded) CHECK(p.records(g) == 0);
          else CHECK(p.records(g) > 0);
        }
        if (std::string(kind) == "random") CHECK(p.records(g) > 0);
      }
  }
}

namespace {
// The batch and prefill kernels' walk (templates/csf_scales.cuh CsfReader inside CsfWarpReader, its list
// and m bit; with parts > 1 as a reader striding over K parts would walk): warp
// `part` of kParts takes chunks part, part + kParts, ... of a slab of `mats` kernel matrices (FC1's two
// matrices, or FC2-sum's two adjacent slabs of a one-matrix plane), keeps a cursor and the chunks until
// its record, and each lane of row group g rebuilds its bytes. Written as the device code is, with the
// warp's 32 lanes as a loop; returns the plain prepared bytes it rebuilt, in prepared_plain_scales' order.
std::vector<uint8_t> kernel_walk(const PreparedScaleGeometry& g, const PreparedCsfPlane& p, int parts, bool pairs) {
  const bool nv = g.format == ScaleFormat::nvfp4;
  const int chunks = g.chunks(), cb = prepared_csf_chunk_bytes(g.format), lb = nv ? 8 : 4;
  std::vector<uint8_t> out(g.plain_bytes());
  const int kmats = g.mats == 2 ? 2 : pairs ? 2 : 1;  // matrices of the kernel's slab
  const int step = g.mats == 2 || !pairs ? 1 : 2;
  for (int e = 0; e < g.experts; ++e)
    for (int slab = 0; slab + (kmats == 2 && g.mats == 1 ? 1 : 0) < g.slabs; slab += step)
      for (int part = 0; part < parts; ++part)
        for (int lane = 0; lane < 32; ++lane) {
          const int grp = lane >> 2;
          const int64_t slab_index = static_cast<int64_t>(e) * g.slabs + slab;
          const int64_t list = g.mats == 2 ? slab_index : static_cast<int64_t>(e) * ((g.slabs + 1) / 2) + slab / 2;
          const uint32_t start = p.exc[static_cast<size_t>(list)] | (g.mats == 2 ? 0u : static_cast<uint32_t>(slab & 1) << 31);
          const size_t base_at = static_cast<size_t>(slab_index * g.mats) * 16;
          uint32_t cursor = start;
          int gap = static_cast<int>(p.exc[cursor & 0x7FFFFFFFu] >> 16) - part;
          for (int c = part; c < chunks; c += parts) {
            for (int m = 0; m < kmats; ++m) {
              const size_t b = base_at + 16 * m;
              const uint32_t pattern = (p.base[b + 2 * grp] | static_cast<uint32_t>(p.base[b + 2 * grp + 1]) << 8) * 0x00010001u;
              // Matrix m's offsets: the next matrix of the chunk, or the next slab's run.
              const size_t at = static_cast<size_t>(((slab_index + (g.mats == 1 ? m : 0)) * chunks + c) * g.mats +
                                                    (g.mats == 2 ? m : 0)) * cb + (nv ? 4 * grp : 0);
              const uint32_t w = p.offsets[at] | p.offsets[at + 1] << 8 | p.offsets[at + 2] << 16 |
                                 static_cast<uint32_t>(p.offsets[at + 3]) << 24;
              uint32_t x, y = 0;
              if (nv) {
                x = (w & 0x0F0F0F0Fu) + pattern;
                y = ((w >> 4) & 0x0F0F0F0Fu) + pattern;
              } else {
                x = ((((w >> (lane & 0x1C)) & 0xFu) * 0x00204081u) & 0x01010101u) + pattern;
              }
              // Records (only where gap <= 0; the device applies them to all matrices at once).
              if (gap <= 0) {
                const uint32_t who = kmats == 2 ? static_cast<uint32_t>(grp) : grp | (cursor >> 31) << 3;
                uint32_t cur = cursor;
                uint32_t r = p.exc[cur & 0x7FFFFFFFu];
                const uint32_t cc = (r >> 16) - static_cast<uint32_t>(gap);
                REQUIRE(cc == static_cast<uint32_t>(c));
                while ((r >> 16) <= cc) {
                  const uint32_t key = (r >> 11) & 0xFu;
                  if ((r >> 16) == cc && (kmats == 2 ? (key & 7u) == who : key == who) &&
                      (kmats == 1 || (key >> 3) == static_cast<uint32_t>(m))) {
                    const uint32_t i = (r >> 8) & 7u, sh = 8u * (i & 3u);
                    uint32_t& word = i < 4 ? x : y;
                    word = (word & ~(0xFFu << sh)) | (r & 0xFFu) << sh;
                  }
                  ++cur;
                  r = p.exc[cur & 0x7FFFFFFFu];
                }
                if (m == kmats - 1) {
                  cursor = cur;
                  gap = static_cast<int>((r >> 16) - cc);
                }
              }
              const int64_t unit_slab = slab + (g.mats == 1 ? m : 0);
              for (int i = 0; i < lb; ++i) {
                const size_t o = static_cast<size_t>(((((static_cast<int64_t>(e) * g.slabs + unit_slab) * chunks + c) * g.mats +
                                                       (g.mats == 2 ? m : 0)) * 8 + grp) * lb + i);
                if (lane % 4 == 0) out[o] = static_cast<uint8_t>((i < 4 ? x : y) >> (8 * (i & 3)));
              }
            }
            gap -= parts;
          }
        }
  return out;
}

// The decode kernels' CSF stage (templates/csf_scales.cuh CsfStage::rebuild and read): warp `part` of
// kParts, starting a slab (or, with `pairs`, the slab pair 2p, 2p + 1 of a one-matrix plane), rebuilds the
// plain bytes of its chunks part, part + kParts, ... into its own area: each lane takes 4 row groups of one
// matrix of a chunk per pass (offsets words plus the base pattern, one 16- or 32-byte store), then each lane
// one word of the list at a time (the head, 32 words at a time, then from exc, while no sentinel is seen)
// and stores the byte of a record of the warp's chunks (and, for one slab of a one-matrix plane, of its
// parity). The chunk
// loop then reads its lane's bytes from the area. Written as the device code is, with the warp's 32 lanes as
// loops; returns the plain prepared bytes read from the areas, in prepared_plain_scales' order.
std::vector<uint8_t> stage_walk(const PreparedScaleGeometry& g, const PreparedCsfPlane& p, int parts, bool pairs) {
  const bool nv = g.format == ScaleFormat::nvfp4;
  const int chunks = g.chunks(), cb = prepared_csf_chunk_bytes(g.format), lb = nv ? 8 : 4, pb = 8 * lb;
  std::vector<uint8_t> out(g.plain_bytes());
  const int kmats = g.mats == 2 ? 2 : pairs ? 2 : 1;    // matrices of the kernel's slab
  const int plane_mats = g.mats;                         // matrices interleaved per chunk in the plane
  const bool slab_pair = g.mats == 1 && pairs;
  const int step = slab_pair ? 2 : 1;
  const int part_chunks_most = (chunks + parts - 1) / parts;
  const int per_pass = 16 / kmats, passes = (part_chunks_most + per_pass - 1) / per_pass;
  for (int e = 0; e < g.experts; ++e)
    for (int slab = 0; slab + (slab_pair ? 1 : 0) < g.slabs; slab += step)
      for (int part = 0; part < parts; ++part) {
        const int64_t slab_index = static_cast<int64_t>(e) * g.slabs + slab;
        const int64_t list = g.mats == 2 ? slab_index : static_cast<int64_t>(e) * ((g.slabs + 1) / 2) + slab / 2;
        const uint32_t parity = static_cast<uint32_t>(slab & 1);
        const size_t base_at = static_cast<size_t>(slab_index * g.mats) * 16;
        const size_t offsets_at = static_cast<size_t>(slab_index * chunks * g.mats) * cb;
        const int my_chunks = part < chunks ? (chunks - 1 - part) / parts + 1 : 0;
        // Garbage where nothing is written, so that a byte the rebuild misses shows.
        std::vector<uint8_t> area(static_cast<size_t>(part_chunks_most) * kmats * pb, 0xA5);
        auto word_at = [&](size_t o) {
          return p.offsets.at(o) | p.offsets.at(o + 1) << 8 | p.offsets.at(o + 2) << 16 |
                 static_cast<uint32_t>(p.offsets.at(o + 3)) << 24;
        };
        // The words.
        for (int lane = 0; lane < 32; ++lane) {
          const int h = lane & 1, m = kmats == 2 ? (lane >> 1) & 1 : 0, i0 = lane >> (kmats == 2 ? 2 : 1);
          const size_t b = base_at + 16 * m + 8 * h;  // rows (g, g + 8) of groups 4h .. 4h + 3
          for (int k = 0; k < passes; ++k) {
            const int i = i0 + k * per_pass;
            if (i >= my_chunks) break;
            const int c = part + i * parts;
            const size_t o = offsets_at + static_cast<size_t>(c * plane_mats + (slab_pair ? 0 : m)) * cb +
                             (slab_pair ? static_cast<size_t>(m) * chunks * cb : 0) + (nv ? 16 * h : 0);
            for (int q = 0; q < 4; ++q) {
              const uint32_t pattern =
                  (p.base.at(b + 2 * q) | static_cast<uint32_t>(p.base.at(b + 2 * q + 1)) << 8) * 0x00010001u;
              uint32_t x, y = 0;
              if (nv) {
                const uint32_t w = word_at(o + 4 * q);
                x = (w & 0x0F0F0F0Fu) + pattern;
                y = ((w >> 4) & 0x0F0F0F0Fu) + pattern;
              } else {
                const uint32_t bits = (word_at(o) >> (16 * h + 4 * q)) & 0xFu;
                x = ((bits * 0x00204081u) & 0x01010101u) + pattern;
              }
              const size_t at = static_cast<size_t>(i * kmats + m) * pb + static_cast<size_t>(4 * h + q) * lb;
              for (int j = 0; j < lb; ++j) area[at + j] = static_cast<uint8_t>((j < 4 ? x : y) >> (8 * (j & 3)));
            }
          }
        }
        // The records, 32 words at a time.
        const size_t head_at = static_cast<size_t>(list) * p.head_words;
        uint32_t word[32];
        for (int lane = 0; lane < 32; ++lane) word[lane] = p.head.at(head_at + lane);
        uint32_t start = 0;
        for (int from = 0;; from += 32) {
          uint32_t sentinels = 0;
          for (int lane = 0; lane < 32; ++lane)
            if (word[lane] == kPreparedCsfSentinel) sentinels |= 1u << lane;
          int first = 0;  // lanes below the list's sentinel hold its records
          while (first < 32 && !(sentinels >> first & 1u)) ++first;
          for (int lane = 0; lane < first; ++lane) {
            const uint32_t r = word[lane], c = r >> 16, mbit = (r >> 14) & 1u;
            if (c % static_cast<uint32_t>(parts) != static_cast<uint32_t>(part)) continue;
            if (kmats == 1 && mbit != parity) continue;
            const uint32_t m = kmats == 2 ? mbit : 0u;
            area.at(((c / parts) * kmats + m) * pb + ((r >> 11) & 7u) * lb + ((r >> 8) & 7u)) = static_cast<uint8_t>(r);
          }
          if (sentinels) break;
          if (from + 32 < p.head_words) {
            for (int lane = 0; lane < 32; ++lane) word[lane] = p.head.at(head_at + from + 32 + lane);
            continue;
          }
          if (from + 32 == p.head_words) start = p.exc.at(static_cast<size_t>(list));
          for (int lane = 0; lane < 32; ++lane) word[lane] = p.exc.at(start + from + 32 + lane);
        }
        // The chunk loop's reads.
        for (int i = 0; i < my_chunks; ++i)
          for (int m = 0; m < kmats; ++m) {
            const int c = part + i * parts;
            const int64_t unit_slab = slab + (g.mats == 1 ? m : 0);
            for (int grp = 0; grp < 8; ++grp)
              for (int j = 0; j < lb; ++j) {
                const size_t o = static_cast<size_t>(((((static_cast<int64_t>(e) * g.slabs + unit_slab) * chunks + c) * g.mats +
                                                       (g.mats == 2 ? m : 0)) * 8 + grp) * lb + j);
                out[o] = area[static_cast<size_t>(i * kmats + m) * pb + static_cast<size_t>(grp) * lb + j];
              }
          }
      }
  return out;
}
}  // namespace

TEST_CASE("prepared csf: the kernels' walk over K parts rebuilds every plain byte", "[csf][prepared]") {
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4})
    for (int mats : {2, 1})
      for (const char* kind : {"spread", "random"}) {
        const PreparedScaleGeometry g = geometry(f, 2, 4, mats, 64 * 7 + (f == ScaleFormat::nvfp4 ? 16 : 32));
        const std::vector<uint8_t> logical = logical_plane(g, kind, 11);
        const PreparedCsfPlane p = build_prepared_csf(g, logical.data());
        const std::vector<uint8_t> want = prepared_plain_scales(g, logical.data());
        for (int parts : {1, 2, 3, 8})
          for (bool pairs : {false, true}) {
            if (pairs && mats == 2) continue;
            INFO(to_string(f) << " mats " << mats << " " << kind << " parts " << parts << " slab pairs " << pairs);
            CHECK(kernel_walk(g, p, parts, pairs) == want);
            CHECK(stage_walk(g, p, parts, pairs) == want);
          }
      }
}

TEST_CASE("prepared csf: the decode kernels' stages rebuild every plain byte, every geometry and input",
          "[csf][prepared]") {
  // The round trip's geometries (odd slab counts, partial last chunks, K of one block), K parts that leave
  // some warps without a chunk, slab pairs where the slab count is even.
  struct Case {
    int experts, slabs, mats, k, order;
  };
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    const int block = scale_block(f);
    const Case cases[] = {{2, 3, 2, 256, 0}, {2, 3, 2, 256, 1}, {2, 2, 2, 192, 2}, {3, 5, 1, 128, 0},
                          {2, 4, 1, 64 + 2 * block, 0}, {1, 2, 2, block, 0}, {2, 3, 1, 320 + block, 0},
                          {1, 2, 1, 64 * 40, 0}};
    for (const Case& c : cases)
      for (const char* kind : {"random", "equal", "narrow", "spread"}) {
        const PreparedScaleGeometry g = geometry(f, c.experts, c.slabs, c.mats, c.k, c.order);
        const std::vector<uint8_t> logical = logical_plane(g, kind, 5);
        const PreparedCsfPlane p = build_prepared_csf(g, logical.data());
        const std::vector<uint8_t> want = prepared_plain_scales(g, logical.data());
        for (int parts : {1, 3, 16}) {
          INFO(to_string(f) << " E" << c.experts << " slabs " << c.slabs << " mats " << c.mats << " K " << c.k
                            << " order " << c.order << " " << kind << " parts " << parts);
          CHECK(stage_walk(g, p, parts, false) == want);
          if (c.mats == 1 && c.slabs % 2 == 0) CHECK(stage_walk(g, p, parts, true) == want);
        }
      }
  }
  // Lists around the words of either head and past them (then exc's words, 32 at a time).
  for (int records : {31, 32, 33, 63, 64, 65, 96, 97, 127, 128, 160, 200})
    for (int head_words : {32, 64, 128}) {
      const PreparedScaleGeometry g = geometry(ScaleFormat::nvfp4, 1, 1, 2, 64 * 8);
      std::vector<uint8_t> logical(32 * 32, 60);
      for (int r = 0; r < records; ++r) logical[static_cast<size_t>(r % 32) * 32 + r / 32 * 5 + 1] = 200;
      const PreparedCsfPlane p = build_prepared_csf(g, logical.data(), head_words);
      REQUIRE(p.records(g) == records);
      REQUIRE(p.head_words == head_words);
      REQUIRE(expand_prepared_csf(g, p) == prepared_plain_scales(g, logical.data()));
      for (int parts : {1, 2, 3}) {
        INFO(records << " records, a head of " << head_words << " words, parts " << parts);
        CHECK(stage_walk(g, p, parts, false) == prepared_plain_scales(g, logical.data()));
      }
    }
  // The head's length: the fewest words of 32, 64 and 128 that hold the longest list, else 128.
  const PreparedScaleGeometry g = geometry(ScaleFormat::nvfp4, 2, 4, 2, 64 * 4);
  for (const char* kind : {"equal", "spread", "random"}) {
    const PreparedCsfPlane p = build_prepared_csf(g, logical_plane(g, kind, 3).data());
    size_t longest = 0;
    for (int64_t list = 0; list < g.lists(); ++list)
      longest = std::max<size_t>(longest, p.exc[static_cast<size_t>(list) + 1] - p.exc[static_cast<size_t>(list)]);
    INFO(kind << ": the longest list " << longest << " words, a head of " << p.head_words);
    CHECK(p.head_words == (longest <= 32 ? 32 : longest <= 64 ? 64 : 128));
  }
  CHECK_THROWS_WITH(build_prepared_csf(g, logical_plane(g, "equal", 3).data(), 48), Contains("32, 64 or 128 words"));
}

TEST_CASE("prepared csf: byte layout the kernels read (nibbles, bits, bases, records)", "[csf][prepared]") {
  SECTION("nvfp4: the lane word's low nibbles are plain bytes 0..3, the high nibbles bytes 4..7") {
    // One expert, one slab, one matrix, one chunk: plain prepared byte (g, i) is row g + 8 (i % 2),
    // block i / 2.
    const PreparedScaleGeometry g = geometry(ScaleFormat::nvfp4, 1, 1, 1, 64);
    std::vector<uint8_t> logical(16 * 4, 50);
    logical[3 * 4 + 2] = 50 + 9;        // row 3, block 2: g 3, i 4 -> high nibble of byte 4*3 + 0
    logical[(8 + 5) * 4 + 1] = 50 + 6;  // row 13 = g 5 + 8, block 1: i 3 -> low nibble of byte 4*5 + 3
    logical[7 * 4 + 0] = 200;           // row 7, block 0: outside [50, 65] -> a record g 7, i 0
    const PreparedCsfPlane p = round_trip(g, logical);
    REQUIRE(p.offsets.size() == 32);
    CHECK(p.offsets[12] == 0x90);
    CHECK(p.offsets[23] == 0x06);
    CHECK(p.base[2 * 3] == 50);
    CHECK(p.base[2 * 7] == 50);  // the base covers the most bytes of the row: the record is 200
    // One list: start, end, its record and the sentinel, then the window's padding; its head the same.
    REQUIRE(p.exc.size() == 2 + 2 + kPreparedCsfTail);
    CHECK(p.exc[0] == 2);
    CHECK(p.exc[1] == 4);
    CHECK(p.exc[2] == (0u << 16 | 0u << 14 | 7u << 11 | 0u << 8 | 200u));
    CHECK(p.exc[3] == kPreparedCsfSentinel);
    CHECK(std::all_of(p.exc.begin() + 4, p.exc.end(), [](uint32_t w) { return w == kPreparedCsfSentinel; }));
    REQUIRE(p.head_words == 32);
    REQUIRE(p.head.size() == 32u);
    CHECK(p.head[0] == p.exc[2]);
    CHECK(std::all_of(p.head.begin() + 1, p.head.end(), [](uint32_t w) { return w == kPreparedCsfSentinel; }));
  }
  SECTION("mxfp4: one word per chunk, nibble g, bit i; FC2 lists pair slabs, m = the slab's parity") {
    const PreparedScaleGeometry g = geometry(ScaleFormat::mxfp4, 1, 3, 1, 128);  // 2 chunks, 3 slabs
    REQUIRE(g.lists() == 2);
    std::vector<uint8_t> logical(48 * 4, 120);
    logical[(16 + 2) * 4 + 3] = 121;       // slab 1, row 2, block 3: chunk 1, g 2, i 2 -> bit 10 of the word
    logical[(16 + 8 + 1) * 4 + 0] = 7;     // slab 1, row 9 = g 1 + 8, block 0: chunk 0, i 1 -> record
    const PreparedCsfPlane p = round_trip(g, logical);
    REQUIRE(p.offsets.size() == 3 * 2 * 4);
    const size_t word = (1 * 2 + 1) * 4;  // slab 1, chunk 1
    CHECK((p.offsets[word + 1] >> 2 & 1) == 1);
    CHECK(p.records(g) == 1);
    // List 0 covers slabs 0 and 1 (slab 1's records carry m = 1), list 1 slab 2 alone.
    CHECK(p.exc[p.exc[0]] == (0u << 16 | 1u << 14 | 1u << 11 | 1u << 8 | 7u));
    CHECK(p.exc[p.exc[0] + 1] == kPreparedCsfSentinel);
    CHECK(p.exc[p.exc[1]] == kPreparedCsfSentinel);
  }
  SECTION("FC1: both matrices in one list, records by chunk, m = the matrix") {
    const PreparedScaleGeometry g = geometry(ScaleFormat::nvfp4, 1, 1, 2, 128);  // gate rows 0-15, up 16-31
    std::vector<uint8_t> logical(32 * 8, 60);
    logical[(16 + 4) * 8 + 0] = 0;  // up, row 4, block 0: chunk 0, m 1, g 4, i 0
    logical[2 * 8 + 5] = 0;         // gate, row 2, block 5: chunk 1, m 0, g 2, i 2
    const PreparedCsfPlane p = round_trip(g, logical);
    REQUIRE(p.records(g) == 2);
    CHECK(p.exc[2] == (0u << 16 | 1u << 14 | 4u << 11 | 0u << 8 | 0u));
    CHECK(p.exc[3] == (1u << 16 | 0u << 14 | 2u << 11 | 2u << 8 | 0u));
  }
}

TEST_CASE("prepared csf: realistic layers shrink, random scales do not", "[csf][prepared][layer]") {
  for (const char* name : {"gpt-oss-20b", "qwen3-30b-a3b"}) {
    LayerSpec spec = load_model_config(name).local();
    spec.experts = 2;
    const HostLayer real = make_realistic_layer(spec, 3);
    const HostLayer noise = make_random_code_layer(spec, 3);
    const bool gated = is_gated(spec.activation);
    const PreparedScaleGeometry g1{spec.format,      spec.experts, spec.intermediate / 16, gated ? 2 : 1, spec.hidden,
                                   spec.fc1_rows(), 0};
    const PreparedScaleGeometry g2{spec.format, spec.experts, spec.hidden / 16, 1, spec.intermediate, spec.hidden, 0};
    INFO(name);
    const PreparedCsfPlane r1 = round_trip(g1, real.w13_scale), r2 = round_trip(g2, real.w2_scale);
    CHECK(r1.bytes() < g1.plain_bytes());
    CHECK(r2.bytes() < g2.plain_bytes());
    const PreparedCsfPlane n1 = round_trip(g1, noise.w13_scale);
    CHECK(n1.bytes() > g1.plain_bytes());
  }
}

TEST_CASE("keys: csf_scales is the tile suffix z, kept per kind, and reaches the generated source", "[csf][key]") {
  const LayerSpec spec = load_model_config("gpt-oss-120b").local();
  const Plan plain = make_plan(spec, Arch::sm_90a, 1, 132);
  const Plan csf = with_csf_scales(plain, 3);
  REQUIRE(csf.kernels.size() == plain.kernels.size());
  for (size_t i = 0; i < csf.kernels.size(); ++i) {
    const KernelKey& k = csf.kernels[i];
    INFO(k.str());
    CHECK(KernelKey::parse(k.str()) == k);
    const std::string src = generate_source(k).source;
    switch (k.kind) {
      case KernelKind::decode_fc1:
      case KernelKind::decode_fc1_loop:
      case KernelKind::decode_fc1_stream:
        CHECK(k.csf_scales == 1);
        CHECK_THAT(k.str(), Contains("z1:"));
        CHECK_THAT(src, Contains("#define MOEJIT_CSF_FC1 1"));
        break;
      case KernelKind::decode_fc2:
      case KernelKind::decode_fc2_sum:
        CHECK(k.csf_scales == 2);
        CHECK_THAT(src, Contains("#define MOEJIT_CSF_FC2 1"));
        break;
      default: CHECK(k.csf_scales == 0);
    }
  }
  // The batch and prefill kernels keep their plane's bit too; a8/a4 keys none.
  for (Family family : {Family::batch, Family::prefill}) {
    const Plan big = with_csf_scales(make_plan(spec, Arch::sm_90a, 4096, 132, family), 3);
    for (const KernelKey& k : big.kernels) {
      INFO(k.str());
      CHECK(KernelKey::parse(k.str()) == k);
      const std::string src = generate_source(k).source;
      switch (k.kind) {
        case KernelKind::batch_fc1:
        case KernelKind::prefill_fc1:
          CHECK(k.csf_scales == 1);
          CHECK_THAT(k.str(), Contains("z1:"));
          CHECK_THAT(src, Contains("#define MOEJIT_CSF_FC1 1"));
          break;
        case KernelKind::batch_fc2:
        case KernelKind::prefill_fc2:
          CHECK(k.csf_scales == 2);
          CHECK_THAT(k.str(), Contains("z2:"));
          CHECK_THAT(src, Contains("#define MOEJIT_CSF_FC2 1"));
          break;
        default: CHECK(k.csf_scales == 0);
      }
    }
  }
  LayerSpec a8 = spec;
  a8.precision = ActPrecision::a8;
  for (const KernelKey& k : with_csf_scales(make_plan(a8, Arch::sm_90a, 256, 132, Family::batch), 3).kernels)
    CHECK(k.csf_scales == 0);
  KernelKey fused = plain.kernels.back();
  fused.kind = KernelKind::decode_fused;
  fused.csf_scales = 3;
  CHECK(fused.normalized().csf_scales == 3);
  KernelKey bad = fused;
  bad.csf_scales = 4;
  CHECK_THROWS_WITH(bad.normalized(), Contains("csf_scales must be in [0, 3]"));
  // Keys without CSF keep their strings (and so their cache entries).
  CHECK_THAT(plain.kernels.back().str(), !Contains("z"));
  CHECK(with_csf_scales(plain, 0).kernels == plain.kernels);
  // A layer that keeps its plain planes (prepare's default) has the batch and prefill keys read them: their
  // keys are the plain plan's, the decode keys those of CSF reads.
  for (Family family : {Family::batch, Family::prefill}) {
    const Plan big = make_plan(spec, Arch::sm_90a, 4096, 132, family);
    CHECK(with_csf_scales(big, 3, 0).kernels == big.kernels);
    CHECK(with_csf_scales(big, 3, 3).kernels == with_csf_scales(big, 3).kernels);
  }
  CHECK(with_csf_scales(plain, 3, 0).kernels == csf.kernels);
  const std::vector<KernelKey> range = keys_for_range(spec, Arch::sm_90a, 4096, 132);
  for (const KernelKey& k : with_csf_scales(range, 3, 0)) {
    INFO(k.str());
    switch (k.kind) {
      case KernelKind::batch_fc1:
      case KernelKind::batch_fc2:
      case KernelKind::prefill_fc1:
      case KernelKind::prefill_fc2: CHECK(k.csf_scales == 0); break;
      case KernelKind::decode_fc1: CHECK(k.csf_scales == 1); break;
      default: break;
    }
  }
}

TEST_CASE("CSF decode kernels of every decode kind compile for sm_90a and sm_120a", "[csf][compile]") {
  // Every decode key the planner uses at M = 1..32 for an MXFP4 and an NVFP4 model (grid, loop and
  // stream FC1, FC2 and FC2-sum), with CSF reads, and the cooperative kernel; relu2's one-matrix FC1
  // (lists per two slabs) on sm_90a. Each fits the architecture with its CSF scale stages at the CTAs per SM
  // it is built for (the ptxas report's static shared memory).
  struct Model {
    const char* name;
    std::vector<Arch> archs;
  };
  const Model models[] = {{"gpt-oss-120b", {Arch::sm_90a, Arch::sm_120a}},
                          {"deepseek-v3", {Arch::sm_90a, Arch::sm_120a}},
                          {"nemotron-3-nano-30b-a3b", {Arch::sm_90a}}};
  for (const Model& model : models) {
    const LayerSpec spec = load_model_config(model.name).local();
    for (Arch arch : model.archs) {
      std::vector<KernelKey> keys = with_csf_scales(keys_for_range(spec, arch, 32, 132), 3);
      KernelKey fused = make_plan(spec, arch, 1, 132).kernels.back();
      fused.kind = KernelKind::decode_fused;
      keys.push_back(with_csf_scales(std::vector<KernelKey>{fused}, 3).at(0));
      const ArchLimits& a = arch_limits(arch);
      for (const KernelKey& key : keys) {
        if (key.csf_scales == 0) continue;  // the route kernel
        INFO("key " << key.str());
        CompileOutput out;
        REQUIRE_NOTHROW(out = compile_source(generate_source(key), arch));
        CHECK(out.binary.size() > 0);
        CHECK(out.registers > 0);
        const int dynamic = kernel_dynamic_smem(key), ctas = kernel_ctas_per_sm(key);
        INFO(out.shared_bytes << " + " << dynamic << " bytes of shared memory, " << ctas << " CTAs per SM");
        CHECK(out.shared_bytes + dynamic <= a.max_dynamic_smem);
        CHECK(ctas * (out.shared_bytes + dynamic + a.smem_reserved) <= a.smem_per_sm);
      }
    }
  }
}

TEST_CASE("CSF decode keys: scale stages beside a staged x row, and stages past static shared memory",
          "[csf][key]") {
  // DeepSeek-V3 at one token stages x in FC1 at 8 CTAs per SM; with its CSF scale stage beside it a CTA no
  // longer fits 8 times, so its CSF key reads x per step, in 8 columns (NVFP4's long warps), at 8 CTAs.
  const LayerSpec spec = load_model_config("deepseek-v3").local();
  const KernelKey fc1 = make_plan(spec, Arch::sm_90a, 1, 132).kernels.front();
  REQUIRE(fc1.kind == KernelKind::decode_fc1);
  REQUIRE(fc1.x_staged);
  const KernelKey csf = with_csf_scales(std::vector<KernelKey>{fc1}, 1).at(0);
  CHECK_FALSE(csf.x_staged);
  CHECK(csf.columns == 8);
  CHECK(kernel_ctas_per_sm(csf) == kernel_ctas_per_sm(fc1));
  CHECK(kernel_dynamic_smem(csf) == 0);
  // A hidden size whose FC1 stages exceed static shared memory: dynamic shared memory, which the generated
  // source takes (and the plain key none).
  KernelKey big = fc1;
  big.x_staged = false;
  big.hidden = 32768;
  big = big.normalized();
  const KernelKey big_csf = with_csf_scales(std::vector<KernelKey>{big}, 1).at(0);
  CHECK(kernel_dynamic_smem(big) == 0);
  CHECK(kernel_dynamic_smem(big_csf) == 512 * 2 * 64);
  CHECK_THAT(generate_source(big_csf).source, Contains("#define MOEJIT_CSF_STAGE_DYNAMIC 1"));
  CHECK_THAT(generate_source(big).source, !Contains("MOEJIT_CSF_STAGE_DYNAMIC"));
  CompileOutput out;
  REQUIRE_NOTHROW(out = compile_source(generate_source(big_csf), Arch::sm_90a));
  CHECK(out.shared_bytes < 48 * 1024);
  const ArchLimits& a = arch_limits(Arch::sm_90a);
  CHECK(kernel_ctas_per_sm(big_csf) * (out.shared_bytes + kernel_dynamic_smem(big_csf) + a.smem_reserved) <=
        a.smem_per_sm);
}

TEST_CASE("CSF batch and prefill kernels compile for sm_90a (and batch for sm_120a)", "[csf][compile]") {
  // Every batch and prefill key the planner uses from M = 33 to 16384 for an MXFP4 gated model with bias
  // and limit, an NVFP4 gated one and an NVFP4 relu2 one (one FC1 matrix), with CSF reads: the
  // register-fed kernels in one and two slabs per warp, the warpgroup-MMA kernels, the prefill kernels
  // (FC2 over one and two slabs per warp), and tails: H and I not multiples of 64, an odd slab count.
  std::vector<LayerSpec> specs;
  for (const char* name : {"gpt-oss-120b", "deepseek-v3", "nemotron-3-nano-30b-a3b"}) specs.push_back(load_model_config(name).local());
  LayerSpec tail = specs[1];
  tail.experts = 16;
  tail.top_k = 4;
  tail.hidden = 16 * 45;  // 720: 45 slabs of FC2, a half-full last chunk of FC1's K
  tail.intermediate = 16 * 37;  // 592: 37 slabs of FC1, a quarter-full last chunk of FC2's K
  specs.push_back(tail);
  int compiled = 0;
  for (const LayerSpec& spec : specs)
    for (Arch arch : {Arch::sm_90a, Arch::sm_120a}) {
      std::vector<KernelKey> keys;
      for (int m : {33, 200, 1024, 4096, 16384})
        for (Family family : {Family::batch, Family::prefill}) {
          if (family == Family::prefill && arch != Arch::sm_90a) continue;
          for (const KernelKey& k : with_csf_scales(make_plan(spec, arch, m, 132, family), 3).kernels)
            if (k.csf_scales != 0 && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
        }
      // FC2 over one slab per warp in prefill (the planner takes two where they fit).
      if (arch == Arch::sm_90a) {
        KernelKey one = with_csf_scales(make_plan(spec, arch, 4096, 132, Family::prefill), 3).kernels.back();
        one.slabs = 1;
        keys.push_back(one.normalized());
      }
      for (const KernelKey& key : keys) {
        INFO("key " << key.str());
        CompileOutput out;
        REQUIRE_NOTHROW(out = compile_source(generate_source(key), arch));
        CHECK(out.binary.size() > 0);
        CHECK(out.registers > 0);
        ++compiled;
      }
    }
  CHECK(compiled > 30);
}
