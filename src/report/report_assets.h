// Private to report: the page's assets, embedded at build time (cmake/embed_assets.cmake).
#pragma once

#include <cstddef>

namespace meridian::report {

struct Asset {
  const char* data;
  size_t size;
};

extern const Asset kPageHtml;  // src/report/page.html, with /*STYLE*/, /*UPLOT*/, /*SCRIPT*/, /*DATA*/
extern const Asset kPageCss;   // src/report/page.css
extern const Asset kPageJs;    // src/report/page.js
extern const Asset kUplotJs;   // src/report/vendor/uplot/uPlot.iife.min.js
extern const Asset kUplotCss;  // src/report/vendor/uplot/uPlot.min.css

}  // namespace meridian::report
