#include "core/torch/code_names.h"

#include "gtest/gtest.h"

namespace ckptscan::torch {
namespace {

TEST(CodeNamesTest, SystemModulesAtTheTopRunCode) {
  EXPECT_TRUE(TargetRunsCode("os.system"));
  EXPECT_TRUE(TargetRunsCode("subprocess.Popen"));
  EXPECT_TRUE(TargetRunsCode("builtins.eval"));
  EXPECT_TRUE(TargetRunsCode("posix.system"));
  EXPECT_TRUE(TargetRunsCode("importlib.import_module"));
  EXPECT_TRUE(TargetRunsCode("runpy.run_path"));
  EXPECT_TRUE(TargetRunsCode("code.InteractiveInterpreter"));
  EXPECT_TRUE(TargetRunsCode("os"));
}

TEST(CodeNamesTest, SystemModuleReachedThroughAnAttributeRunsCode) {
  // _locate getattr's its way from logging to logging.os, which is os.
  EXPECT_TRUE(TargetRunsCode("logging.os.system"));
  EXPECT_TRUE(TargetRunsCode("mypkg.subprocess.run"));
}

TEST(CodeNamesTest, DunderComponentRunsCode) {
  EXPECT_TRUE(TargetRunsCode("json.__builtins__.get"));
  EXPECT_TRUE(TargetRunsCode("mypkg.f.__globals__"));
}

TEST(CodeNamesTest, CodeCallableAnywhereRunsCode) {
  EXPECT_TRUE(TargetRunsCode("mypkg.eval"));
  EXPECT_TRUE(TargetRunsCode("torch.utils.cpp_extension.load_inline"));
  EXPECT_TRUE(TargetRunsCode("eval"));
}

TEST(CodeNamesTest, FrameworkLoadersRunCode) {
  EXPECT_TRUE(TargetRunsCode("torch.load"));
  EXPECT_TRUE(TargetRunsCode("torch.hub.load"));
  EXPECT_TRUE(TargetRunsCode("numpy.load"));
  EXPECT_TRUE(TargetRunsCode("yaml.unsafe_load"));
  EXPECT_TRUE(TargetRunsCode("hydra.utils.instantiate"));
}

TEST(CodeNamesTest, ClassesOfFrameworksAndProjectsOnlyImport) {
  EXPECT_FALSE(TargetRunsCode("torch.optim.Adam"));
  EXPECT_FALSE(TargetRunsCode("torch.loader.Thing"));  // a prefix of a name is not the name
  EXPECT_FALSE(TargetRunsCode("nemo.collections.asr.models.EncDecCTCModel"));
  EXPECT_FALSE(TargetRunsCode("mypkg.code.Model"));  // "code" counts at the top only
  EXPECT_FALSE(TargetRunsCode("functools.partial"));
  EXPECT_FALSE(TargetRunsCode("osmodule.Thing"));
  EXPECT_FALSE(TargetRunsCode(""));
}

TEST(CodeNamesTest, KerasFrameworksAreNotSystemModules) {
  EXPECT_TRUE(IsFrameworkModule("torch.nn"));
  EXPECT_FALSE(IsSystemModule("torch.nn"));
  EXPECT_TRUE(IsSystemModule("os.path"));
  EXPECT_FALSE(IsFrameworkModule("os.path"));
}

TEST(CodeNamesTest, HubRepoOfCrossRepositoryReference) {
  EXPECT_EQ(HubRepoOf("org/repo--modeling.Model"), "org/repo");
  EXPECT_EQ(HubRepoOf("modeling.Model"), "");
  EXPECT_EQ(HubRepoOf("--modeling.Model"), "");
}

TEST(CodeNamesTest, LocalPathsAreNotHubIds) {
  EXPECT_TRUE(IsLocalModelPath("/models/llama"));
  EXPECT_TRUE(IsLocalModelPath("~/models/llama"));
  EXPECT_TRUE(IsLocalModelPath("./base"));
  EXPECT_TRUE(IsLocalModelPath("."));
  EXPECT_TRUE(IsLocalModelPath("org/../../etc"));
  EXPECT_TRUE(IsLocalModelPath("..\\base"));
  EXPECT_TRUE(IsLocalModelPath("C:\\models\\base"));
  EXPECT_TRUE(IsLocalModelPath("\\\\server\\share"));
}

TEST(CodeNamesTest, HubIdsAreNotLocalPaths) {
  EXPECT_FALSE(IsLocalModelPath("meta-llama/Llama-2-7b-hf"));
  EXPECT_FALSE(IsLocalModelPath("gpt2"));
  EXPECT_FALSE(IsLocalModelPath("org/name.v1..2"));  // dots inside a name are no component
  EXPECT_FALSE(IsLocalModelPath(""));
}

}  // namespace
}  // namespace ckptscan::torch
