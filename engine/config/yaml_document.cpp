#include "engine/config/yaml_document.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <new>
#include <sstream>

#include "engine/config/schema.h"
#include "engine/config/section_reader.h"
#include "engine/config/text.h"
#include "engine/config/text_checks.h"
#include "engine/config/value_reader.h"

namespace ptrain::config {
namespace {

// A bare event pass over the text before any node is built, for two guards:
// - yaml-cpp 0.7's YAML::LoadAll never returns on a stray ',' at the top level: the parser reports
//   an empty document without consuming the token, forever, allocating each time (yaml-cpp issue
//   #1040, fixed upstream later). The pass stops when a document starts where the previous did.
// - building nodes costs about 500 bytes each: a 4 MiB flow list would take a gigabyte and many
//   seconds. A job spec has about a hundred values, so the pass stops past kMaxNodes.
constexpr std::size_t kMaxNodes = 1 << 16;

struct TooManyNodes {
  YAML::Mark mark;
};

class DocumentScanner final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (documents_ > 0 && mark.pos == previous_start_.pos) stuck_ = true;
    if (documents_ == 1) second_start_ = mark;
    previous_start_ = mark;
    ++documents_;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { count_node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { count_node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    count_node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    count_node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    count_node(mark);
  }
  void OnMapEnd() override {}

  bool stuck() const { return stuck_; }
  std::size_t documents() const { return documents_; }
  const YAML::Mark& previous_start() const { return previous_start_; }
  const YAML::Mark& second_start() const { return second_start_; }

 private:
  void count_node(const YAML::Mark& mark) {
    if (++nodes_ > kMaxNodes) throw TooManyNodes{mark};
  }

  std::size_t documents_ = 0;
  std::size_t nodes_ = 0;
  bool stuck_ = false;
  YAML::Mark previous_start_;
  YAML::Mark second_start_;
};

struct DocumentScan {
  std::size_t documents = 0;
  YAML::Mark second_document;
  std::optional<YAML::Mark> stuck_at;
};

DocumentScan scan_documents(const std::string& text) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  DocumentScanner scanner;
  while (parser.HandleNextDocument(scanner)) {
    if (scanner.stuck()) return {scanner.documents(), scanner.second_start(), scanner.previous_start()};
  }
  return {scanner.documents(), scanner.second_start(), std::nullopt};
}

Diagnostic located(const std::string& key, Location where, std::string message, std::string fix) {
  return {key, where.line, where.column, std::move(message), std::move(fix), std::move(where.origin)};
}

}  // namespace

std::optional<ParsedYaml> parse_yaml(LoadContext& ctx, std::string_view text, const Source& source,
                                     const std::string& key) {
  if (std::optional<TextProblem> problem = find_text_problem(text)) {
    Location where = source.has_positions ? Location{problem->line, problem->column, source.origin}
                                          : Location{0, 0, source.origin};
    ctx.report_error(located(key, where, problem->message, problem->fix));
    return std::nullopt;
  }
  std::string owned(text);
  try {
    DocumentScan scan = scan_documents(owned);
    if (scan.stuck_at) {
      std::string token =
          printable(std::string_view(owned).substr(static_cast<std::size_t>(scan.stuck_at->pos), 1));
      ctx.report_error(located(key, source.at(*scan.stuck_at),
                               cat("invalid YAML: unexpected ", quoted(token)),
                               "remove it, or put the value in [brackets] if it is a list"));
      return std::nullopt;
    }
    return ParsedYaml{YAML::Load(owned), scan.documents, scan.second_document};
  } catch (const TooManyNodes& e) {
    ctx.report_error(located(key, source.at(e.mark), cat("the YAML holds more than ", kMaxNodes, " values"),
                             "a job spec has about a hundred; is this the right file?"));
  } catch (const YAML::DeepRecursion& e) {
    ctx.report_error(located(key, source.at(e.mark), cat("YAML nested deeper than ", e.depth(), " levels"),
                             "a job spec needs three levels; is this the right file?"));
  } catch (const YAML::Exception& e) {
    std::string fix = source.has_positions ? "check the indentation, brackets and quotes at this position"
                                           : "quote text values: --set 'key=\"text\"'";
    ctx.report_error(located(key, source.at(e.mark), cat("invalid YAML: ", e.msg), fix));
  } catch (const std::bad_alloc&) {
    ctx.report_error(located(key, {0, 0, source.origin}, "out of memory while parsing the YAML", ""));
  }
  return std::nullopt;
}

bool read_document(LoadContext& ctx, std::string_view text, const Source& source) {
  std::optional<ParsedYaml> parsed = parse_yaml(ctx, text, source, "");
  if (!parsed) return false;
  if (parsed->documents == 0 || parsed->first.IsNull()) {
    ctx.report_error(
        located("", {0, 0, source.origin}, "the job spec is empty",
                "write at least the model section; configs/tiny-cpu.yaml is a complete example"));
    return false;
  }
  if (parsed->documents > 1) {
    ctx.report_error(located("", source.at(parsed->second_document),
                             cat("found ", parsed->documents, " YAML documents; a job spec is exactly one"),
                             "remove the '---' separators and merge the documents"));
  }
  const YAML::Node& root = parsed->first;
  if (!root.IsMap()) {
    ctx.report_error(located(
        "", source.at(root.Mark()),
        cat("the top level must be a mapping of keys (name:, model:, parallel:, ...), got ", describe(root)),
        "start the file with key: value lines, as in configs/tiny-cpu.yaml"));
    return false;
  }
  read_section(ctx, root_section(), root, source, source.at(root.Mark()));
  return true;
}

}  // namespace ptrain::config
