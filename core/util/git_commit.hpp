// The commit dpft was built from, stamped at build time (cmake/git_stamp.cmake), so manifests
// and `dpft version` name the source of the binary even when commits land without a re-configure.
#pragma once

namespace dpft::build {
// 12 hex digits, with "-dirty" when tracked files had uncommitted changes; "unknown" outside git.
const char* git_commit();
}  // namespace dpft::build
