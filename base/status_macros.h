// Status propagation macros for absl::Status / absl::StatusOr.
//
//   CKPT_RETURN_IF_ERROR(DoThing());
//   CKPT_ASSIGN_OR_RETURN(auto value, ComputeValue());
#ifndef CKPTSCAN_BASE_STATUS_MACROS_H_
#define CKPTSCAN_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CKPT_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::absl::Status ckpt_status_ = (expr);           \
    if (!ckpt_status_.ok()) return ckpt_status_;    \
  } while (0)

#define CKPT_STATUS_CONCAT_INNER_(a, b) a##b
#define CKPT_STATUS_CONCAT_(a, b) CKPT_STATUS_CONCAT_INNER_(a, b)

#define CKPT_ASSIGN_OR_RETURN(lhs, expr) \
  CKPT_ASSIGN_OR_RETURN_IMPL_(CKPT_STATUS_CONCAT_(ckpt_statusor_, __LINE__), lhs, expr)

#define CKPT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = *std::move(statusor)

#endif  // CKPTSCAN_BASE_STATUS_MACROS_H_
