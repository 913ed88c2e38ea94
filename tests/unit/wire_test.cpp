// Control frames: what goes out comes back, and anything malformed is refused.
#include <gtest/gtest.h>

#include <cstring>

#include "transport/wire.hpp"

namespace troupe::wire {
namespace {

TEST(Wire, HelloRoundTrips) {
  Hello h{3, 4, "secret", {1, 2, 3, 4, 5}, "node-7", ProcessId{4026531836, 4242}};
  Frame f = encode_hello(h);
  auto back = decode_hello(&f.header, sizeof f.header, f.payload.data(), f.payload.size());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->world_size, 4);
  EXPECT_EQ(back->token, "secret");
  EXPECT_EQ(back->address, h.address);
  EXPECT_EQ(back->host, "node-7");
  EXPECT_EQ(back->process, h.process);
}

TEST(Wire, TableRoundTrips) {
  Table t{{{1}, {2, 2}, {3, 3, 3}}, {"a", "a", "b"}, {{7, 10}, {7, 11}, {9, 10}}};
  Frame f = encode_table(3, t);
  auto back = decode_table(&f.header, sizeof f.header, f.payload.data(), f.payload.size());
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->addresses, t.addresses);
  EXPECT_EQ(back->hosts, t.hosts);
  EXPECT_EQ(back->processes, t.processes);
}

TEST(Wire, TruncatedPayloadIsRefused) {
  Frame f = encode_hello(Hello{1, 2, "token", {9, 9, 9}, "h", ProcessId{1, 2}});
  for (std::size_t n = 0; n < f.payload.size(); ++n) {
    f.header.payload_bytes = n;
    EXPECT_FALSE(decode_hello(&f.header, sizeof f.header, f.payload.data(), n).ok()) << n;
  }
}

TEST(Wire, WrongMagicVersionKindOrRankIsRefused) {
  Frame good = encode_reason(Kind::abort, 1, 2, "why");
  auto check = [&](Header h) {
    return decode_reason(Kind::abort, &h, sizeof h, good.payload.data(), good.payload.size());
  };
  Header h = good.header;
  EXPECT_TRUE(check(h).ok());
  h.magic ^= 1;
  EXPECT_FALSE(check(h).ok());
  h = good.header;
  h.version += 1;
  EXPECT_FALSE(check(h).ok());
  h = good.header;
  h.kind = static_cast<uint16_t>(Kind::hello);
  EXPECT_FALSE(check(h).ok());
  h = good.header;
  h.rank = 2;
  EXPECT_FALSE(check(h).ok());
  h = good.header;
  EXPECT_FALSE(decode_reason(Kind::abort, &h, sizeof h - 1, good.payload.data(), good.payload.size()).ok());
}

TEST(Wire, LengthFieldsLargerThanTheFrameAreRefused) {
  Frame f = encode_hello(Hello{1, 2, "token", {9}, "h", {}});
  uint32_t huge = 1u << 30;
  std::memcpy(f.payload.data(), &huge, sizeof huge);
  EXPECT_FALSE(decode_hello(&f.header, sizeof f.header, f.payload.data(), f.payload.size()).ok());
}

TEST(Wire, TableWithWrongCountIsRefused) {
  Frame f = encode_table(3, Table{{{1}, {2}}, {"a", "b"}, {{1, 1}, {1, 2}}});
  EXPECT_FALSE(decode_table(&f.header, sizeof f.header, f.payload.data(), f.payload.size()).ok());
}

}  // namespace
}  // namespace troupe::wire
