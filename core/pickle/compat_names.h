// Private to core/pickle: CPython's fix_imports, the Python 2 -> 3 renaming that find_class
// applies for protocols below 3 (Lib/_compat_pickle.py, table in compat_pickle_table.inc).
#ifndef CKPTSCAN_CORE_PICKLE_COMPAT_NAMES_H_
#define CKPTSCAN_CORE_PICKLE_COMPAT_NAMES_H_

#include "core/pickle/facts.h"

namespace ckptscan::pickle::internal {

// Sets g->resolved_module/resolved_name from g->module/name: for protocol < 3, a Python 2
// name is mapped first (a whole name, else the module); otherwise they are copied.
void ResolveCompatNames(int proto, GlobalRef* g);

}  // namespace ckptscan::pickle::internal

#endif  // CKPTSCAN_CORE_PICKLE_COMPAT_NAMES_H_
