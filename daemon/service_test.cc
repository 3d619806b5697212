// ckptscand's services in process: a grpc::Server with ScannerService and AdminService and an
// in-process channel, the real jailed worker behind them. What the shell tests prove end to end
// (daemon/daemon_test.sh), here at the RPC surface, and the same answers as the application
// layer gives the CLI (app/): an index's shards followed by path, missing in an upload, and a
// safetensors input converted whole.
#include "daemon/service.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "app/convert.h"
#include "app/engine.h"
#include "app/judge.h"
#include "app/report.h"
#include "app/scan_file.h"
#include "app/scan_set.h"
#include "ckptscan/v1/scanner.grpc.pb.h"
#include "daemon/confine.h"
#include "daemon/job_slots.h"
#include "daemon/metrics.h"
#include "gtest/gtest.h"
#include "sandbox/run.h"
#include "sandbox/testcases/sanitizers.h"

namespace ckptscan::daemon {
namespace {

#define SKIP_UNDER_SANITIZERS() \
  if (sandbox::kUnderSanitizer) GTEST_SKIP() << sandbox::kSanitizerSkipReason

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string Fixture(const std::string& rel) {
  return absl::StrCat(CKPT_SOURCE_DIR, "/tests/fixtures/", rel);
}

// A small valid safetensors file: F32 [2] and I64 [1].
std::string Safetensors() {
  std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  std::string data(16, '\0');
  data[3] = 0x3f;  // 0.5f
  data[8] = 7;     // 7
  return out + header + data;
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ckptscan-service-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/root";
    spool_ = dir_ + "/spool";
    ASSERT_EQ(::mkdir(root_.c_str(), 0700), 0);
    ASSERT_EQ(::mkdir(spool_.c_str(), 0700), 0);
    // A complete sharded set, the same index with its second shard gone, and a safetensors file.
    const std::string sharded = Fixture("torch/sharded/");
    for (const std::string sub : {"/complete", "/partial"}) {
      ASSERT_EQ(::mkdir((root_ + sub).c_str(), 0700), 0);
      WriteFile(root_ + sub + "/" + kIndex, ReadFile(sharded + kIndex));
      WriteFile(root_ + sub + "/" + kShard1, ReadFile(sharded + kShard1));
    }
    WriteFile(root_ + "/complete/" + kShard2, ReadFile(sharded + kShard2));
    WriteFile(root_ + "/model.safetensors", Safetensors());

    ServiceOptions options;
    options.scanner_version = "test";
    options.spool_dir = spool_;
    if (sandbox::kUnderSanitizer) GTEST_SKIP() << sandbox::kSanitizerSkipReason;
    app::EngineConfig config;
    config.jail.worker_path = CKPT_WORKER;
    absl::StatusOr<std::unique_ptr<app::Engine>> engine = app::Engine::Create(config);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
    absl::StatusOr<ConfinedRoots> roots = ConfinedRoots::Open({root_});
    ASSERT_TRUE(roots.ok()) << roots.status();
    absl::StatusOr<signing::PrivateKey> key = signing::PrivateKey::Generate();
    ASSERT_TRUE(key.ok()) << key.status();
    slots_ = std::make_unique<JobSlots>(2, 8);
    metrics_ = std::make_unique<Metrics>(slots_.get());
    daemon_ = std::make_unique<Daemon>(options, engine_.get(),
                                       std::make_unique<ConfinedRoots>(*std::move(roots)),
                                       *std::move(key), slots_.get(), metrics_.get());
    scanner_service_ = std::make_unique<ScannerService>(daemon_.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(scanner_service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = v1::Scanner::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  v1::Report ScanPath(const std::string& path, bool single_file = false) {
    grpc::ClientContext ctx;
    v1::ScanPathRequest request;
    request.set_path(path);
    request.mutable_options()->set_single_file(single_file);
    v1::Report report;
    const grpc::Status s = stub_->ScanPath(&ctx, request, &report);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return report;
  }

  v1::Report ScanUpload(const std::string& name, const std::string& bytes) {
    grpc::ClientContext ctx;
    v1::Report report;
    std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> w = stub_->ScanUpload(&ctx, &report);
    v1::UploadChunk header;
    header.mutable_header()->set_name(name);
    header.mutable_header()->set_size(bytes.size());
    EXPECT_TRUE(w->Write(header));
    v1::UploadChunk data;
    data.set_data(bytes);
    EXPECT_TRUE(w->Write(data));
    EXPECT_TRUE(w->WritesDone());
    const grpc::Status s = w->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return report;
  }

  // What the CLI's local scan of the same set gives: app::ScanSet over local files, jailed.
  v1::Report LocalScan(const std::string& path) {
    struct Local final : app::FileSource {
      sandbox::JailOptions jail;
      std::shared_ptr<const rules::RuleSet> rules = rules::RuleSet::Default();
      v1::FileReport Scan(const std::string& p) override {
        absl::StatusOr<v1::FileReport> r = app::ScanFile(p, *rules, {}, jail);
        return r.ok() ? *r : app::UnreadableFileReport(p, r.status());
      }
      absl::StatusOr<app::FileId> Find(const std::string& p) override {
        struct stat st;
        if (::stat(p.c_str(), &st) != 0) return app::MissingFile(p, errno);
        return app::FileId{st.st_dev, st.st_ino};
      }
    } local;
    local.jail.worker_path = CKPT_WORKER;
    v1::Report report = app::NewReport("test", local.rules->version());
    app::ScanTarget target;
    target.path = path;
    app::ScanSet({target}, {}, &local, &report);
    return report;
  }

  static constexpr char kIndex[] = "pytorch_model.bin.index.json";
  static constexpr char kShard1[] = "pytorch_model-00001-of-00002.bin";
  static constexpr char kShard2[] = "pytorch_model-00002-of-00002.bin";
  std::string dir_, root_, spool_;
  std::unique_ptr<app::Engine> engine_;
  std::unique_ptr<JobSlots> slots_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<ScannerService> scanner_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Scanner::Stub> stub_;
};

int Count(const v1::FileReport& f, v1::ErrorCode code) {
  int n = 0;
  for (const v1::ScanError& e : f.errors()) n += e.code() == code;
  return n;
}

TEST_F(ServiceTest, ScanPathFollowsAnIndexToItsShardsLikeTheCli) {
  SKIP_UNDER_SANITIZERS();
  const std::string index = root_ + "/complete/" + kIndex;
  const v1::Report report = ScanPath(index);
  ASSERT_EQ(report.files_size(), 3) << report.DebugString();
  EXPECT_EQ(report.verdict(), v1::VERDICT_SAFE);
  EXPECT_EQ(report.files(1).path(), root_ + "/complete/" + kShard1);
  EXPECT_EQ(report.files(2).path(), root_ + "/complete/" + kShard2);
  EXPECT_EQ(report.SerializeAsString(), LocalScan(index).SerializeAsString());
}

TEST_F(ServiceTest, ScanPathOfAnIndexWithAShardMissingIsErrorLikeTheCli) {
  SKIP_UNDER_SANITIZERS();
  const std::string index = root_ + "/partial/" + kIndex;
  const v1::Report report = ScanPath(index);
  ASSERT_EQ(report.files_size(), 2) << report.DebugString();
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  EXPECT_EQ(Count(report.files(0), v1::ERROR_CODE_MISSING_SHARD), 1);
  EXPECT_EQ(report.SerializeAsString(), LocalScan(index).SerializeAsString());
}

TEST_F(ServiceTest, SingleFileJudgesTheIndexAlone) {
  SKIP_UNDER_SANITIZERS();
  const v1::Report report = ScanPath(root_ + "/partial/" + kIndex, /*single_file=*/true);
  ASSERT_EQ(report.files_size(), 1);
  EXPECT_EQ(report.files(0).format(), "hf-index");
  EXPECT_EQ(Count(report.files(0), v1::ERROR_CODE_MISSING_SHARD), 0);
}

TEST_F(ServiceTest, AnUploadedIndexCannotVouchForItsShards) {
  SKIP_UNDER_SANITIZERS();
  const v1::Report report = ScanUpload(kIndex, ReadFile(root_ + "/complete/" + kIndex));
  ASSERT_EQ(report.files_size(), 1);
  EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
  EXPECT_EQ(Count(report.files(0), v1::ERROR_CODE_MISSING_SHARD), 2);
  EXPECT_NE(report.files(0).errors(0).message().find("not in the upload"), std::string::npos)
      << report.files(0).errors(0).message();
}

// An index whose weight_map names itself (or another index) names no checkpoint: every shard
// would be found, and the set was SAFE; a loader would torch.load() the JSON.
TEST_F(ServiceTest, AnIndexNamingItselfAsAShardIsNoSet) {
  SKIP_UNDER_SANITIZERS();
  const std::string self = R"({"weight_map":{"w":"self.json"}})";
  WriteFile(root_ + "/self.json", self);
  for (const v1::Report& report : {ScanPath(root_ + "/self.json"), ScanUpload("self.json", self)}) {
    ASSERT_EQ(report.files_size(), 1) << report.DebugString();
    EXPECT_EQ(report.verdict(), v1::VERDICT_ERROR);
    EXPECT_EQ(Count(report.files(0), v1::ERROR_CODE_MALFORMED), 1) << report.DebugString();
  }
}

TEST_F(ServiceTest, ConvertUploadOfSafetensorsWritesEveryTensor) {
  SKIP_UNDER_SANITIZERS();
  grpc::ClientContext ctx;
  auto stream = stub_->ConvertUpload(&ctx);
  v1::UploadChunk header;
  header.mutable_header()->set_name("model.safetensors");
  header.mutable_header()->mutable_convert()->set_dtype("bf16");
  ASSERT_TRUE(stream->Write(header));
  v1::UploadChunk data;
  data.set_data(Safetensors());
  ASSERT_TRUE(stream->Write(data));
  ASSERT_TRUE(stream->WritesDone());
  v1::ConvertChunk chunk;
  ASSERT_TRUE(stream->Read(&chunk));
  ASSERT_TRUE(chunk.has_response());
  const v1::ConvertResponse response = chunk.response();
  std::string out;
  while (stream->Read(&chunk)) out += chunk.data();
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_TRUE(response.converted()) << response.error() << response.report().DebugString();
  EXPECT_EQ(response.report().files(0).conversion().tensors(), 2u);
  EXPECT_EQ(out.size(), response.output_size());
  EXPECT_FALSE(response.signature().empty());
  EXPECT_NE(out.find(R"("w":{"dtype":"BF16","shape":[2])"), std::string::npos) << out;
  EXPECT_NE(out.find(R"("i":{"dtype":"I64","shape":[1])"), std::string::npos) << out;
}

TEST_F(ServiceTest, ConvertPathOfSafetensorsKeepsEveryTensorsBytes) {
  SKIP_UNDER_SANITIZERS();
  grpc::ClientContext ctx;
  v1::ConvertPathRequest request;
  request.set_input(root_ + "/model.safetensors");
  request.set_output(root_ + "/out.safetensors");
  v1::ConvertResponse response;
  ASSERT_TRUE(stub_->ConvertPath(&ctx, request, &response).ok());
  ASSERT_TRUE(response.converted()) << response.error();
  const std::string out = ReadFile(root_ + "/out.safetensors");
  EXPECT_EQ(out.size(), response.report().files(0).conversion().bytes());
  EXPECT_NE(out.find(R"("w":{"dtype":"F32","shape":[2])"), std::string::npos) << out;
  // The tensors' bytes are the input's (keep), in our order (by alignment, then name).
  const std::string in = Safetensors();
  const std::string w = in.substr(in.size() - 16, 8), i = in.substr(in.size() - 8);
  EXPECT_EQ(out.substr(out.size() - 16), i + w);
}

// ConvertOptions.allow_dtypes is `convert --allow-dtype`: a C64 tensor is written as F32
// [..., 2] unless it names C64 (docs/safetensors.md); a dtype it cannot name is refused.
TEST_F(ServiceTest, ConvertPathWritesComplex64AsRealUnlessAllowDtypesNamesC64) {
  SKIP_UNDER_SANITIZERS();
  std::string header = R"({"z":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string in(8, '\0');
  for (int i = 0; i < 8; ++i) in[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  in += header + std::string("0123456789abcdef");
  WriteFile(root_ + "/complex.safetensors", in);
  struct Case {
    std::vector<std::string> allow;
    std::string written, how, header;
  };
  for (const Case& c :
       {Case{{}, "F32", "as-real", R"("z":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})"},
        Case{{"C64"},
             "C64",
             "allowed",
             R"("z":{"dtype":"C64","shape":[2],"data_offsets":[0,16]})"}}) {
    SCOPED_TRACE(c.how);
    grpc::ClientContext ctx;
    v1::ConvertPathRequest request;
    request.set_input(root_ + "/complex.safetensors");
    request.set_output(root_ + "/complex-" + c.how + ".safetensors");
    for (const std::string& d : c.allow) request.mutable_options()->add_allow_dtypes(d);
    v1::ConvertResponse response;
    ASSERT_TRUE(stub_->ConvertPath(&ctx, request, &response).ok());
    ASSERT_TRUE(response.converted()) << response.error();
    const v1::Conversion& conv = response.report().files(0).conversion();
    ASSERT_EQ(conv.dtypes_size(), 1) << conv.DebugString();
    EXPECT_EQ(conv.dtypes(0).source(), "complex64");
    EXPECT_EQ(conv.dtypes(0).written(), c.written);
    EXPECT_EQ(conv.dtypes(0).how(), c.how);
    EXPECT_EQ(conv.dtypes(0).tensors(), 1u);
    const std::string out = ReadFile(request.output());
    EXPECT_NE(out.find(c.header), std::string::npos) << out;
    EXPECT_EQ(out.substr(out.size() - 16), "0123456789abcdef");  // the same bytes
  }
  grpc::ClientContext ctx;
  v1::ConvertPathRequest request;
  request.set_input(root_ + "/complex.safetensors");
  request.set_output(root_ + "/complex-u16.safetensors");
  request.mutable_options()->add_allow_dtypes("U16");
  v1::ConvertResponse response;
  grpc::Status status = stub_->ConvertPath(&ctx, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("--allow-dtype takes only C64"), std::string::npos)
      << status.error_message();
  // cast_quantized is convert --cast-quantized: with dtype "bf16" only.
  grpc::ClientContext ctx2;
  request.clear_options();
  request.mutable_options()->set_cast_quantized(true);
  status = stub_->ConvertPath(&ctx2, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("cast_quantized: only with dtype"), std::string::npos)
      << status.error_message();
}

}  // namespace
}  // namespace ckptscan::daemon
