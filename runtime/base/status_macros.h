// Status plumbing shared by every module: early-return macros for absl::Status and absl::StatusOr.
// Only control flow lives here; messages are written where the error is found.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TANDEM_STATUS_CONCAT_INNER(a, b) a##b
#define TANDEM_STATUS_CONCAT(a, b) TANDEM_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define TANDEM_RETURN_IF_ERROR(expr)               \
  do {                                             \
    ::absl::Status tandem_status_ = (expr);        \
    if (!tandem_status_.ok()) return tandem_status_; \
  } while (0)

// `lhs = value of expr` when OK, else returns its status. lhs may declare a variable.
#define TANDEM_ASSIGN_OR_RETURN(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL(TANDEM_STATUS_CONCAT(tandem_statusor_, __LINE__), lhs, expr)
#define TANDEM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()
