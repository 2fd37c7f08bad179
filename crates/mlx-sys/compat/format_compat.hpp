// Force-included (-include) into every mlx-c translation unit by build.rs.
//
// mlx-c 0.7.0's mlx/c/private/io.h calls std::format without including <format>; upstream
// builds only because newer standard libraries pull it in transitively. Where <format> does
// not exist (libstdc++ < 13, e.g. GCC 12 on Debian 12) this provides the subset mlx-c uses:
// "{}" placeholders, only to build error messages.
#pragma once
#if defined(__cplusplus)
#if __has_include(<format>)
#include <format>
#else
#include <sstream>
#include <string>
#include <string_view>
namespace std {
template <typename... Args>
inline string format(string_view fmt, const Args&... args) {
  ostringstream out;
  size_t pos = 0;
  auto put = [&](const auto& arg) {
    size_t open = fmt.find("{}", pos);
    if (open == string_view::npos) {
      return;
    }
    out << fmt.substr(pos, open - pos) << arg;
    pos = open + 2;
  };
  (put(args), ...);
  out << fmt.substr(pos);
  return out.str();
}
}  // namespace std
#endif
#endif
