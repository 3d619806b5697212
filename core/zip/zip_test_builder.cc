#include "core/zip/zip_test_builder.h"

#include <zlib.h>

#include <stdexcept>

namespace ckptscan::zip::testing {
namespace {

void Put16(std::string& out, uint64_t v) {
  for (int i = 0; i < 2; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void Put32(std::string& out, uint64_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void Put64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

std::string Deflate(const std::string& raw) {
  z_stream zs{};
  if (deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 9, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2");
  }
  std::string out(deflateBound(&zs, raw.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) throw std::runtime_error("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string BuildZip(const std::vector<TestMember>& members, const BuildOptions& options) {
  std::string out;
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> crcs;
  for (const TestMember& m : members) {
    const uint64_t uncomp = m.uncompressed < 0 ? m.data.size() : m.uncompressed;
    uint32_t crc = 0;
    if (m.method == 0) {
      crc = crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), m.data.size());
    } else {
      // Tests only deflate small inputs; recompute the CRC from the inflated bytes.
      std::string raw(uncomp, '\0');
      z_stream zs{};
      inflateInit2(&zs, -MAX_WBITS);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(m.data.data()));
      zs.avail_in = static_cast<uInt>(m.data.size());
      zs.next_out = reinterpret_cast<Bytef*>(raw.data());
      zs.avail_out = static_cast<uInt>(raw.size());
      inflate(&zs, Z_FINISH);
      inflateEnd(&zs);
      crc = crc32(0, reinterpret_cast<const Bytef*>(raw.data()), raw.size());
    }
    crcs.push_back(crc);
    offsets.push_back(out.size());
    // 'FB' padding so the data starts at a multiple of 64.
    const std::string& local_name = m.local_name.empty() ? m.name : m.local_name;
    uint64_t start = out.size() + 30 + local_name.size() + 4;
    uint64_t pad = (64 - start % 64) % 64;
    std::string extra = "FB";
    Put16(extra, pad);
    extra.append(pad, 'Z');
    out += "PK\x03\x04";
    Put16(out, 0);
    Put16(out, m.local_flags);
    Put16(out, m.method);
    Put32(out, 0);  // time, date
    Put32(out, 0);  // crc
    Put32(out, 0);
    Put32(out, 0);
    Put16(out, local_name.size());
    Put16(out, extra.size());
    out += local_name + extra + m.data;
    out += "PK\x07\x08";
    Put32(out, crc);
    Put32(out, m.data.size());
    Put32(out, uncomp);
  }
  const uint64_t cd_start = out.size();
  for (size_t i = 0; i < members.size(); ++i) {
    const TestMember& m = members[i];
    const uint64_t uncomp = m.uncompressed < 0 ? m.data.size() : m.uncompressed;
    std::string extra;
    if (m.zip64_extra) {
      Put16(extra, 1);
      Put16(extra, 16);
      Put64(extra, uncomp);
      Put64(extra, m.data.size());
    }
    extra += m.cd_extra;
    out += "PK\x01\x02";
    Put16(out, 0);
    Put16(out, 0);
    Put16(out, m.cd_flags);
    Put16(out, m.method);
    Put32(out, 0);
    Put32(out, crcs[i]);
    Put32(out, m.zip64_extra ? 0xFFFFFFFF : m.data.size());
    Put32(out, m.zip64_extra ? 0xFFFFFFFF : uncomp);
    Put16(out, m.name.size());
    Put16(out, extra.size());
    Put16(out, 0);  // comment
    Put16(out, 0);  // disk
    Put16(out, 0);  // internal attributes
    Put32(out, m.external_attributes);
    Put32(out, offsets[i]);
    out += m.name + extra;
  }
  const uint64_t cd_size = out.size() - cd_start;
  const uint64_t n = members.size();
  if (options.zip64_end) {
    const uint64_t z64 = out.size();
    out += "PK\x06\x06";
    Put64(out, 44);
    Put16(out, 0x031E);
    Put16(out, 0x2D);
    Put32(out, 0);
    Put32(out, 0);
    Put64(out, n);
    Put64(out, n);
    Put64(out, cd_size);
    Put64(out, cd_start);
    out += "PK\x06\x07";
    Put32(out, 0);
    Put64(out, z64);
    Put32(out, 1);
  }
  out += "PK\x05\x06";
  Put16(out, 0);
  Put16(out, 0);
  Put16(out, n > 0xFFFF ? 0xFFFF : n);
  Put16(out, n > 0xFFFF ? 0xFFFF : n);
  Put32(out, cd_size);
  Put32(out, cd_start);
  Put16(out, options.comment.size());
  out += options.comment;
  return out;
}

std::vector<TestMember> TorchLikeMembers(const std::string& prefix, const std::string& pickle) {
  return {{prefix + "/data.pkl", pickle},
          {prefix + "/data/0", std::string("\0\0\x80?\0\0\0@\0\0@@", 12)},
          {prefix + "/version", "3\n"}};
}

}  // namespace ckptscan::zip::testing
