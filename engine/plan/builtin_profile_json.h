// profiles/h100-sxm.json as text, generated into the build tree by engine/plan/CMakeLists.txt from
// builtin_profile_json.cpp.in (rebuilt when the file changes). Read only by builtin_profile.cpp.
#pragma once

namespace ptrain::plan {
extern const char* const kBuiltinH100ProfileJson;
}
