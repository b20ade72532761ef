// The dashboard's static files (core/head/dashboard/: index.html, app.js,
// style.css), embedded into the binary at build time by
// cmake/EmbedFiles.cmake, so the head serves them with nothing to install and
// nothing fetched from elsewhere at run time.
//
//   const EmbeddedFile* page = FindEmbeddedFile("index.html");
//   if (page) Serve(page->content_type, page->data);
//
// Immutable; thread-safe.
#pragma once

#include <string_view>

namespace lumen::head {

struct EmbeddedFile {
  std::string_view name;          // the file's base name, e.g. "app.js"
  std::string_view content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view data;          // its bytes
};

// The embedded file named `name`, or nullptr.
const EmbeddedFile* FindEmbeddedFile(std::string_view name);

}  // namespace lumen::head
