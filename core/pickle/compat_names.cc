// CPython's find_class name mapping for protocols below 3 (fix_imports): the table generated
// from Lib/_compat_pickle.py (gen_compat_table.py) and its lookup.
#include "core/pickle/compat_names.h"

namespace ckptscan::pickle::internal {
namespace {

struct NameMapping {
  const char* module2;
  const char* name2;
  const char* module3;
  const char* name3;
};
struct ImportMapping {
  const char* module2;
  const char* module3;
};
#include "core/pickle/compat_pickle_table.inc"

}  // namespace

// CPython's find_class: for protocol < 3 (fix_imports), Python 2 names are mapped first.
void ResolveCompatNames(int proto, GlobalRef* g) {
  g->resolved_module = g->module;
  g->resolved_name = g->name;
  if (proto >= 3) return;
  for (const NameMapping& m : kNameMapping) {
    if (g->module == m.module2 && g->name == m.name2) {
      g->resolved_module = m.module3;
      g->resolved_name = m.name3;
      return;
    }
  }
  for (const ImportMapping& m : kImportMapping) {
    if (g->module == m.module2) {
      g->resolved_module = m.module3;
      return;
    }
  }
}

}  // namespace ckptscan::pickle::internal
