// Parameter servers under the job's CURVE keys: a worker with the token pulls and pushes as
// usual; a process without it (plain TCP, or another job's token) connecting on loopback can
// neither register a table, pull nor push: every request times out, nothing reaches the table,
// and the shard logs and counts the refused connections.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/net/context.h"
#include "core/net/security.h"
#include "core/net/socket.h"
#include "ps/protocol.h"
#include "tests/ps/ps_fixture.h"

namespace aiacc::ps {
namespace {

using testing::table_config;

const std::string kToken = "ps-security-test-token-0123456789";

std::shared_ptr<PsClient> client_with(const std::string& endpoint, std::shared_ptr<net::Context> context,
                                      double timeout_s) {
  ClientOptions options;
  options.endpoints = {endpoint};
  options.timeout_s = timeout_s;
  options.retry_interval_s = timeout_s / 2;
  return std::make_shared<PsClient>(options, std::move(context));
}

TEST(PsSecurity, OnlyClientsWithTheJobTokenCanPullOrPush) {
  auto server_context = net::Context::create(1, net::CurveKeys::from_token(kToken));
  ServerOptions server_options;
  server_options.log_interval_s = 0;
  PsServer server(server_options, server_context);

  const auto config = table_config("emb", 4, "sgd");
  const std::vector<std::int64_t> ids = {1, 2, 3};
  auto member = client_with(server.endpoint(), net::Context::create(1, net::CurveKeys::from_token(kToken)), 30);
  member->create_table(config);
  std::vector<float> before(ids.size() * 4);
  member->wait(member->pull("emb", ids, before.data(), 0));

  for (const std::string& intruder_token : {std::string(), std::string("another-jobs-token-0123456789-abcdef")}) {
    auto context = intruder_token.empty() ? net::Context::create()
                                          : net::Context::create(1, net::CurveKeys::from_token(intruder_token));
    // Through our own client: registering the table times out. The request is sent after the
    // shard has refused the handshake and the connection is gone (so the first send fails): it
    // is retried until its deadline like any unanswered request, not failed at once.
    const std::uint64_t refused = server_context->refused_handshakes();
    auto intruder = client_with(server.endpoint(), context, 1.5);
    for (int i = 0; i < 500 && server_context->refused_handshakes() == refused; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_THROW(intruder->create_table(config), TimeoutError);
    // Through a raw socket: well-formed pull and push requests for the member's table get
    // no reply and change nothing.
    net::Socket raw(context, ZMQ_DEALER, 0);
    raw.connect(server.endpoint());
    for (const Op op : {Op::pull, Op::push}) {
      RequestHeader header;
      header.op = op;
      header.table = table_key("emb");
      header.session = 99;
      header.seq = 1;
      header.count = ids.size();
      header.dim = 4;
      header.lr = 1.0;
      const std::vector<float> grads(ids.size() * 4, 1000.0f);
      zmq_send(raw.handle(), &header, sizeof header, ZMQ_SNDMORE | ZMQ_DONTWAIT);
      zmq_send(raw.handle(), ids.data(), ids.size() * sizeof(std::int64_t),
               (op == Op::push ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT);
      if (op == Op::push) zmq_send(raw.handle(), grads.data(), grads.size() * sizeof(float), ZMQ_DONTWAIT);
      EXPECT_EQ(raw.poll(ZMQ_POLLIN, 1500), 0) << "the shard answered an intruder's " << op_name(op);
    }
  }
  // The table is as it was: no intruder push was applied.
  std::vector<float> after(ids.size() * 4);
  member->wait(member->pull("emb", ids, after.data(), 0));
  EXPECT_EQ(after, before);
  EXPECT_GE(server_context->refused_handshakes(), 2u);
}

}  // namespace
}  // namespace aiacc::ps
