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
  EXPECT_TRUE(TargetRunsCode("pandas.read_pickle"));
  EXPECT_TRUE(TargetRunsCode("transformers.AutoModelForCausalLM.from_pretrained"));
  EXPECT_TRUE(TargetRunsCode("lightning.LightningModule.load_from_checkpoint"));
}

// OmegaConf resolves interpolations and resolvers when Hydra reads the value: any callable.
TEST(CodeNamesTest, InterpolatedTargetsRunCode) {
  EXPECT_TRUE(TargetRunsCode("${t}"));
  EXPECT_TRUE(TargetRunsCode("${oc.decode:'\"os.system\"'}"));
  EXPECT_TRUE(TargetRunsCode("pkg.${name}.Model"));
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
  EXPECT_TRUE(IsLocalModelPath(".git"));  // no Hub id starts with '.'
  EXPECT_TRUE(IsLocalModelPath(".git/sub"));
}

TEST(CodeNamesTest, UnscannedPathsSayWhy) {
  EXPECT_EQ(UnscannedPath(""), "");
  EXPECT_EQ(UnscannedPath("1_Pooling"), "");
  EXPECT_EQ(UnscannedPath("a/b.git/c"), "");
  EXPECT_EQ(UnscannedPath("/abs"), "absolute");
  EXPECT_EQ(UnscannedPath("~/x"), "absolute");
  EXPECT_EQ(UnscannedPath("a/../../b"), "outside the folder");
  EXPECT_EQ(UnscannedPath(".git"), "in a .git folder");
  EXPECT_EQ(UnscannedPath("sub\\.git\\w"), "in a .git folder");
}

TEST(CodeNamesTest, HubIdsAreNotLocalPaths) {
  EXPECT_FALSE(IsLocalModelPath("meta-llama/Llama-2-7b-hf"));
  EXPECT_FALSE(IsLocalModelPath("gpt2"));
  EXPECT_FALSE(IsLocalModelPath("org/name.v1..2"));  // dots inside a name are no component
  EXPECT_FALSE(IsLocalModelPath(""));
}

}  // namespace
}  // namespace ckptscan::torch
