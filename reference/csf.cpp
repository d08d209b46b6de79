// Encoder, decoder and validator of the compressed scale format (docs/CSF.md).
//
// The encoder is exact by construction: every byte lands either in its row's window (as an offset
// from base) or in a record holding the byte itself; plain rows keep their bytes verbatim. The
// validator checks the structural rules a GPU decoder relies on (sizes, row bounds inside the
// exception stream, sorted positions, zero padding) and the canonical ones that make an encoding
// unambiguous (a record's byte lies outside the window, its offset slot is 0), but not the encoder's
// choices (the base and the row mode), which no decoder depends on.
#include "moejit/csf.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <mutex>
#include <string>

#include "moejit/error.hpp"
#include "reference/parallel.hpp"

namespace moejit {
namespace {

int window_width(ScaleFormat format) { return 1 << csf_offset_bits(format); }

// Where offset j of a row lives: byte j * bits / 8 of the row's stride, bit (j * bits) % 8 of it.
struct OffsetSlot {
  int64_t byte;
  int shift;
};
OffsetSlot offset_slot(int bits, int64_t j) { return {(j * bits) >> 3, static_cast<int>((j * bits) & 7)}; }

uint8_t read_offset(const uint8_t* row_offsets, int bits, int64_t j) {
  const OffsetSlot s = offset_slot(bits, j);
  return static_cast<uint8_t>((row_offsets[s.byte] >> s.shift) & ((1 << bits) - 1));
}

int64_t record_position(const uint8_t* record) { return record[0] | (static_cast<int64_t>(record[1]) << 8); }

// The smallest byte v of the row whose window [v, v + width - 1] covers the most bytes of the row, and
// how many it covers. The base is then always one of the row's bytes (an all-equal row gets its byte
// and zero offsets). A window near 255 is cut at 255: bytes above it do not exist.
struct Window {
  int base = 0;
  int64_t covered = 0;
};
Window best_window(const uint8_t* row, int64_t n, int width) {
  std::array<int64_t, 256> count{};
  for (int64_t j = 0; j < n; ++j) ++count[row[j]];
  int64_t covered = 0;
  for (int b = 0; b < width; ++b) covered += count[b];
  Window best{0, count[0] > 0 ? covered : -1};
  for (int b = 1; b < 256; ++b) {
    covered -= count[b - 1];
    if (b + width - 1 < 256) covered += count[b + width - 1];
    if (count[b] > 0 && covered > best.covered) best = {b, covered};
  }
  return best;
}

void check_geometry(const char* what, int64_t rows, int64_t scales_per_row) {
  if (rows < 0) throw Error(std::string(what) + ": rows must be >= 0 (got " + std::to_string(rows) + ")");
  if (scales_per_row < 1 || scales_per_row > kCsfMaxScalesPerRow)
    throw Error(std::string(what) + ": scales per row must be in [1, " + std::to_string(kCsfMaxScalesPerRow) +
                "] (positions are u16; got " + std::to_string(scales_per_row) + ")");
}

// The first rule of docs/CSF.md that row n breaks, or "" when it keeps them all. The plane's sizes and
// exception_start's ends are checked already.
std::string broken_row_rule(const CsfPlane& p, int64_t n) {
  const int64_t C = p.scales_per_row, stride = p.offset_stride();
  const int bits = csf_offset_bits(p.format), width = window_width(p.format);
  const uint32_t begin = p.exception_start[n], end = p.exception_start[n + 1];
  if (end < begin)
    return "exception_start decreases (" + std::to_string(begin) + " then " + std::to_string(end) + ")";
  if (end > p.exceptions.size())
    return "exception_start[" + std::to_string(n + 1) + "] = " + std::to_string(end) + " passes the end of the " +
           std::to_string(p.exceptions.size()) + "-byte exception stream";
  const uint8_t* rec = p.exceptions.data() + begin;
  const int64_t len = end - begin;
  const uint8_t* off = p.offsets.data() + n * stride;
  const int base = p.base[n];
  if (p.mode[n] == static_cast<uint8_t>(CsfRowMode::plain)) {
    if (len != C)
      return "a plain row holds " + std::to_string(C) + " bytes in the exception stream, found " + std::to_string(len);
    if (base != 0) return "a plain row has base 0, found " + std::to_string(base);
    for (int64_t b = 0; b < stride; ++b)
      if (off[b]) return "a plain row has all-zero offsets, byte " + std::to_string(b) + " is not";
    return "";
  }
  if (p.mode[n] != static_cast<uint8_t>(CsfRowMode::packed))
    return "mode " + std::to_string(p.mode[n]) + " is neither 0 (packed) nor 1 (plain)";
  if (len % kCsfRecordBytes != 0)
    return "its exception records take " + std::to_string(len) + " bytes, not a multiple of 3";
  // Offset slots past scale C - 1 (padding to the stride) are zero.
  for (int64_t bit = C * bits; bit < stride * 8; ++bit)
    if ((off[bit >> 3] >> (bit & 7)) & 1)
      return "offset padding bit " + std::to_string(bit) + " (past scale " + std::to_string(C - 1) + ") is not zero";
  const int64_t records = len / kCsfRecordBytes;
  int64_t previous = -1;
  for (int64_t r = 0; r < records; ++r) {
    const int64_t pos = record_position(rec + r * kCsfRecordBytes);
    const int value = rec[r * kCsfRecordBytes + 2];
    if (pos >= C)
      return "exception record " + std::to_string(r) + " has position " + std::to_string(pos) + " >= C = " + std::to_string(C);
    if (pos <= previous)
      return "exception positions are not strictly increasing (" + std::to_string(pos) + " after " +
             std::to_string(previous) + ")";
    if (value - base >= 0 && value - base < width)
      return "exception record at position " + std::to_string(pos) + " holds byte " + std::to_string(value) +
             ", which lies inside the window [" + std::to_string(base) + ", " + std::to_string(base + width - 1) +
             "] (it must be an offset)";
    previous = pos;
  }
  int64_t next_record = 0;
  for (int64_t j = 0; j < C; ++j) {
    const bool is_exception = next_record < records && record_position(rec + next_record * kCsfRecordBytes) == j;
    const int o = read_offset(off, bits, j);
    if (is_exception) {
      ++next_record;
      if (o != 0) return "the offset of exception position " + std::to_string(j) + " is " + std::to_string(o) + ", expected 0";
    } else if (base + o > 255) {
      return "base " + std::to_string(base) + " + offset " + std::to_string(o) + " at scale " + std::to_string(j) +
             " passes 255";
    }
  }
  return "";
}

}  // namespace

int csf_offset_bits(ScaleFormat format) { return format == ScaleFormat::mxfp4 ? 1 : 4; }

int64_t csf_offset_stride(ScaleFormat format, int64_t scales_per_row) {
  const int64_t bytes = (scales_per_row * csf_offset_bits(format) + 7) / 8;
  return (bytes + 3) / 4 * 4;
}

CsfPlane csf_encode(ScaleFormat format, const uint8_t* scales, int64_t rows, int64_t scales_per_row) {
  check_geometry("csf_encode", rows, scales_per_row);
  const int64_t C = scales_per_row;
  const int bits = csf_offset_bits(format), width = window_width(format);
  CsfPlane p;
  p.format = format;
  p.rows = rows;
  p.scales_per_row = C;
  const int64_t stride = p.offset_stride();
  p.base.assign(rows, 0);
  p.mode.assign(rows, static_cast<uint8_t>(CsfRowMode::packed));
  p.offsets.assign(rows * stride, 0);
  p.exception_start.assign(rows + 1, 0);
  for (int64_t n = 0; n < rows; ++n) {
    const uint8_t* row = scales + n * C;
    const Window w = best_window(row, C, width);
    const int64_t outside = C - w.covered;
    if (outside * kCsfRecordBytes >= C) {
      // Records would take at least the row's own bytes: store it plainly (also the faster decode).
      p.mode[n] = static_cast<uint8_t>(CsfRowMode::plain);
      p.exceptions.insert(p.exceptions.end(), row, row + C);
    } else {
      p.base[n] = static_cast<uint8_t>(w.base);
      uint8_t* off = p.offsets.data() + n * stride;
      for (int64_t j = 0; j < C; ++j) {
        const int d = row[j] - w.base;
        if (d >= 0 && d < width) {
          const OffsetSlot s = offset_slot(bits, j);
          off[s.byte] = static_cast<uint8_t>(off[s.byte] | (d << s.shift));
        } else {
          p.exceptions.push_back(static_cast<uint8_t>(j & 0xFF));
          p.exceptions.push_back(static_cast<uint8_t>(j >> 8));
          p.exceptions.push_back(row[j]);
        }
      }
    }
    if (p.exceptions.size() > std::numeric_limits<uint32_t>::max())
      throw Error("csf_encode: the exception stream passes 4 GiB at row " + std::to_string(n) +
                  " (exception_start is u32); store this plane plainly");
    p.exception_start[n + 1] = static_cast<uint32_t>(p.exceptions.size());
  }
  return p;
}

uint8_t CsfPlane::scale(int64_t n, int64_t j) const {
  if (n < 0 || n >= rows || j < 0 || j >= scales_per_row)
    throw Error("CsfPlane::scale: (row " + std::to_string(n) + ", scale " + std::to_string(j) + ") outside [" +
                std::to_string(rows) + ", " + std::to_string(scales_per_row) + "]");
  const uint8_t* rec = exceptions.data() + exception_start[n];
  const int64_t len = exception_start[n + 1] - exception_start[n];
  if (mode[n] == static_cast<uint8_t>(CsfRowMode::plain)) return rec[j];
  // Records are sorted by position: binary search (rows without records skip it).
  int64_t lo = 0, hi = len / kCsfRecordBytes;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    const int64_t pos = record_position(rec + mid * kCsfRecordBytes);
    if (pos == j) return rec[mid * kCsfRecordBytes + 2];
    if (pos < j) lo = mid + 1;
    else hi = mid;
  }
  const int bits = csf_offset_bits(format);
  return static_cast<uint8_t>(base[n] + read_offset(offsets.data() + n * offset_stride(), bits, j));
}

size_t CsfPlane::bytes() const {
  return base.size() + mode.size() + offsets.size() + exception_start.size() * sizeof(uint32_t) + exceptions.size();
}

void CsfPlane::validate(const std::string& name) const {
  const std::string what = "CSF plane " + name;
  check_geometry(what.c_str(), rows, scales_per_row);
  auto size_rule = [&](const char* array, size_t got, int64_t want) {
    if (got != static_cast<size_t>(want))
      throw Error(what + ": " + array + " has " + std::to_string(got) + " entries, expected " + std::to_string(want));
  };
  size_rule("base", base.size(), rows);
  size_rule("mode", mode.size(), rows);
  size_rule("offsets", offsets.size(), rows * offset_stride());
  size_rule("exception_start", exception_start.size(), rows + 1);
  if (exception_start[0] != 0) throw Error(what + ": exception_start[0] is " + std::to_string(exception_start[0]) + ", expected 0");
  if (exception_start[rows] != exceptions.size())
    throw Error(what + ": exception_start[" + std::to_string(rows) + "] = " + std::to_string(exception_start[rows]) +
                " but the exception stream holds " + std::to_string(exceptions.size()) + " bytes");
  // Rows are independent: checked in parallel, and the lowest broken row is the one reported, whatever
  // the thread count.
  int64_t first_bad = rows;
  std::string rule;
  std::mutex mutex;
  detail::parallel_for(rows, detail::worker_count(rows, static_cast<double>(scales_per_row) + 16),
                       [&](int64_t r0, int64_t r1) {
                         for (int64_t n = r0; n < r1; ++n) {
                           std::string why = broken_row_rule(*this, n);
                           if (why.empty()) continue;
                           const std::lock_guard<std::mutex> lock(mutex);
                           if (n < first_bad) {
                             first_bad = n;
                             rule = std::move(why);
                           }
                           return;
                         }
                       });
  if (first_bad < rows) throw Error(what + ": row " + std::to_string(first_bad) + ": " + rule);
}

std::vector<uint8_t> csf_decode(const CsfPlane& p) {
  p.validate("(decode)");
  const int64_t C = p.scales_per_row, stride = p.offset_stride();
  const int bits = csf_offset_bits(p.format);
  std::vector<uint8_t> out(static_cast<size_t>(p.rows * C));
  // Rows are independent (the host-side expansion of prepare runs over hundreds of MB per layer).
  detail::parallel_for(p.rows, detail::worker_count(p.rows, static_cast<double>(C)), [&](int64_t r0, int64_t r1) {
    for (int64_t n = r0; n < r1; ++n) {
      uint8_t* dst = out.data() + n * C;
      const uint8_t* rec = p.exceptions.data() + p.exception_start[n];
      const int64_t len = p.exception_start[n + 1] - p.exception_start[n];
      if (p.mode[n] == static_cast<uint8_t>(CsfRowMode::plain)) {
        std::copy(rec, rec + C, dst);
        continue;
      }
      const uint8_t* off = p.offsets.data() + n * stride;
      for (int64_t j = 0; j < C; ++j) dst[j] = static_cast<uint8_t>(p.base[n] + read_offset(off, bits, j));
      for (int64_t r = 0; r < len; r += kCsfRecordBytes) dst[record_position(rec + r)] = rec[r + 2];
    }
  });
  return out;
}

CsfPlaneStats csf_stats(const CsfPlane& p) {
  CsfPlaneStats s;
  for (int64_t n = 0; n < p.rows; ++n) {
    if (p.mode[n] == static_cast<uint8_t>(CsfRowMode::plain)) {
      ++s.plain_rows;
    } else {
      ++s.packed_rows;
      s.exceptions += (p.exception_start[n + 1] - p.exception_start[n]) / kCsfRecordBytes;
    }
  }
  s.plain_bytes = static_cast<size_t>(p.rows * p.scales_per_row);
  s.csf_bytes = p.bytes();
  return s;
}

}  // namespace moejit
