//===- ExplainTest.cpp - the plan report, the timeline, the HTML page -----===//
//
// Built against hetplan_runtime alone. Set HETPLAN_TEST_KEEP_SVG=FOLDER to
// keep the timelines it draws (to look at them).
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Explain.h"
#include "hetplan/runtime/PlanFile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <unistd.h>

using namespace hetplan;
using namespace hetplan::runtime;

// In PlanFileTest.cpp.
plan::Plan makeSamplePlan(int numStages = 2, int workers = 2, int microBatches = 4,
                          bool gpipe = false);

namespace {

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

/// A small well-formedness check: one root element, tags nest and match,
/// attributes are quoted, entities are the five XML ones or numeric.
bool wellFormedXml(const std::string &xml, std::string &why) {
  std::vector<std::string> open;
  bool rootSeen = false;
  size_t i = 0;
  auto fail = [&](const std::string &message) {
    why = message + " at byte " + std::to_string(i);
    return false;
  };
  auto checkText = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k)
      if (xml[k] == '&') {
        size_t semi = xml.find(';', k);
        if (semi == std::string::npos || semi > to)
          return false;
        std::string entity = xml.substr(k + 1, semi - k - 1);
        if (entity != "amp" && entity != "lt" && entity != "gt" && entity != "quot" &&
            entity != "apos" && (entity.empty() || entity[0] != '#'))
          return false;
      } else if (xml[k] == '>') {
        return false;
      }
    return true;
  };
  while (i < xml.size()) {
    size_t lt = xml.find('<', i);
    if (lt == std::string::npos) {
      if (!checkText(i, xml.size()))
        return fail("bad text");
      for (size_t k = i; k < xml.size(); ++k)
        if (!isspace(static_cast<unsigned char>(xml[k])))
          return fail("text after the root element");
      break;
    }
    if (!checkText(i, lt))
      return fail("bad character data");
    if (open.empty() && rootSeen)
      for (size_t k = i; k < lt; ++k)
        if (!isspace(static_cast<unsigned char>(xml[k])))
          return fail("text outside the root");
    i = lt;
    if (xml.compare(i, 5, "<?xml") == 0) {
      size_t end = xml.find("?>", i);
      if (i != 0 || end == std::string::npos)
        return fail("misplaced XML declaration");
      i = end + 2;
      continue;
    }
    if (xml.compare(i, 4, "<!--") == 0) {
      size_t end = xml.find("-->", i);
      if (end == std::string::npos)
        return fail("unterminated comment");
      i = end + 3;
      continue;
    }
    // A tag: scan to '>' outside quotes.
    size_t k = i + 1;
    char quote = 0;
    for (; k < xml.size(); ++k) {
      if (quote) {
        if (xml[k] == quote)
          quote = 0;
        else if (xml[k] == '<')
          return fail("'<' in an attribute value");
      } else if (xml[k] == '"' || xml[k] == '\'') {
        quote = xml[k];
      } else if (xml[k] == '>') {
        break;
      }
    }
    if (k >= xml.size())
      return fail("unterminated tag");
    std::string tag = xml.substr(i + 1, k - i - 1);
    i = k + 1;
    if (!tag.empty() && tag[0] == '/') {
      std::string name = tag.substr(1);
      while (!name.empty() && isspace(static_cast<unsigned char>(name.back())))
        name.pop_back();
      if (open.empty() || open.back() != name)
        return fail("</" + name + "> does not close <" + (open.empty() ? "" : open.back()) + ">");
      open.pop_back();
      continue;
    }
    bool selfClosing = !tag.empty() && tag.back() == '/';
    size_t nameEnd = tag.find_first_of(" \t\n/");
    std::string name = tag.substr(0, nameEnd);
    if (name.empty() || !(isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_'))
      return fail("bad tag name '" + name + "'");
    // Attributes: name="value" pairs.
    std::string rest = nameEnd == std::string::npos ? "" : tag.substr(nameEnd);
    if (selfClosing)
      rest.pop_back();
    for (size_t a = 0; a < rest.size();) {
      if (isspace(static_cast<unsigned char>(rest[a]))) {
        ++a;
        continue;
      }
      size_t eq = rest.find('=', a);
      if (eq == std::string::npos || eq + 1 >= rest.size() ||
          (rest[eq + 1] != '"' && rest[eq + 1] != '\''))
        return fail("unquoted attribute in <" + name + ">");
      size_t close = rest.find(rest[eq + 1], eq + 2);
      if (close == std::string::npos)
        return fail("unterminated attribute in <" + name + ">");
      a = close + 1;
    }
    if (open.empty() && rootSeen)
      return fail("a second root element <" + name + ">");
    rootSeen = true;
    if (!selfClosing)
      open.push_back(name);
  }
  if (!open.empty())
    return fail("<" + open.back() + "> is not closed");
  if (!rootSeen)
    return fail("no root element");
  return true;
}

void keep(const std::string &name, const std::string &svg) {
  if (const char *folder = std::getenv("HETPLAN_TEST_KEEP_SVG")) {
    std::ofstream out(std::string(folder) + "/" + name, std::ios::binary);
    out << svg;
  }
}

} // namespace

TEST(Explain, SettingsNameTheMemorySavers) {
  plan::Plan p = makeSamplePlan();
  p.mutable_stages(1)->set_recompute(true);
  p.mutable_settings()->set_zero_stage(2);
  p.mutable_settings()->set_offload_optimizer(true);
  std::ostringstream os;
  explainPlan(p, os);
  EXPECT_NE(os.str().find("  memory savers    recomputation on stage 1; ZeRO-2; optimizer state "
                          "in host memory\n"),
            std::string::npos)
      << os.str();
  p.mutable_stages(0)->set_recompute(true);
  std::ostringstream both;
  explainPlan(p, both);
  EXPECT_NE(both.str().find("recomputation on stages 0, 1; ZeRO-2"), std::string::npos)
      << both.str();
}

TEST(Explain, RatesKeepThreeSignificantDigits) {
  // 1.25 GB/s is not "1.2 GB/s" (issue 23); round figures keep one decimal.
  plan::Plan p = makeSamplePlan();
  p.mutable_cluster()->set_inter_node_bandwidth_gbs(1.25);
  p.mutable_prediction()->set_samples_per_s(3.456);
  std::ostringstream os;
  explainPlan(p, os);
  EXPECT_NE(os.str().find("  inter-node       1.25 GB/s, 5.0 us latency"), std::string::npos)
      << os.str();
  EXPECT_NE(os.str().find("  throughput       3.46 samples/s"), std::string::npos) << os.str();
  p.mutable_cluster()->set_inter_node_bandwidth_gbs(0.125);
  p.mutable_prediction()->set_samples_per_s(600);
  std::ostringstream small;
  explainPlan(p, small);
  EXPECT_NE(small.str().find("  inter-node       0.125 GB/s"), std::string::npos) << small.str();
  EXPECT_NE(small.str().find("  throughput       600.0 samples/s"), std::string::npos)
      << small.str();
}

TEST(Explain, ReportHasTheKeyLines) {
  std::ostringstream os;
  explainPlan(makeSamplePlan(), os);
  const std::string text = os.str();
  for (const char *line : {
           "hetplan plan (schema 1, written by hetplan test)",
           "  file             models/tiny-gpt.onnx (498.0 MiB, sha256 0123456789abcdef...)",
           "  graph            tiny-gpt",
           "  parameters       35.0M (35000000)",
           "  nodes            10 top-level nodes in 5 layers",
           "Cluster  node0:2xA100-80GB,node1:2xV100-32GB",
           "  devices          4 devices",
           "    A100-80GB      2    0,1  80.0 GiB        312.0   1.00",
           "  inter-node       25.0 GB/s, 5.0 us latency",
           "  mode             train (optimizer adam)",
           "  batch            32 samples per step, 4 micro-batches of 8",
           "  sequence         1024",
           "  dtype            bf16",
           "  micro-batches    4",
           "  schedule         1f1b",
           "  strategy         hetplan",
           "  memory savers    none",
           "  bound dims       batch=8, sequence=1024",
           "Stages (2, in pipeline order)",
           "  stage  ranks  devices       layers                 TP  batch share  fwd ms  bwd ms  "
           "all-reduce ms  send ms",
           "      0  0,1    2x A100-80GB  0-2 (embed .. block1)   1  4+4           10.00   20.00  "
           "         5.00     1.00",
           "      1  2,3    2x V100-32GB  3-4 (block2 .. head)    1  4+4           12.00   24.00  "
           "         5.00     0.00",
           "Memory per rank (peak over the schedule, against capacity)",
           "     0  A100-80GB      0  7.3 GiB  80.0 GiB    9%  40.1 MiB  40.1 MiB  240.3 MiB      6.0 GiB  "
           "     0 B    1.0 GiB",
           "     3  V100-32GB      1  4.3 GiB  32.0 GiB   13%",
           "Prediction (cost model roofline)",
           "  throughput       ",
           "  bubble           12.5%",
           "  MFU              41.0%",
           "  FLOPs per step   720.00 GFLOP",
           "  search           1.25 s, 4567 plans evaluated",
       })
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "\n" << text;
  char step[64];
  std::snprintf(step, sizeof(step), "  step time        %.2f ms",
                makeSamplePlan().prediction().step_time_s() * 1e3);
  EXPECT_NE(text.find(step), std::string::npos) << text;
}

TEST(Explain, InferencePlansHaveNoBackwardColumns) {
  plan::Plan p = makeSamplePlan();
  p.mutable_settings()->set_mode("infer");
  p.mutable_settings()->clear_optimizer();
  std::ostringstream os;
  explainPlan(p, os);
  EXPECT_EQ(os.str().find("bwd ms"), std::string::npos) << os.str();
  EXPECT_EQ(os.str().find("optimizer"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("  mode             infer\n"), std::string::npos) << os.str();
}

TEST(Explain, ShowsIdleRanksAndMemoryOverCapacity) {
  plan::Plan p = makeSamplePlan();
  p.mutable_ranks(3)->mutable_memory()->set_peak(uint64_t(40) << 30);
  *p.mutable_cluster()->add_devices() = p.cluster().devices(3);
  p.mutable_cluster()->mutable_devices(4)->set_rank(4);
  p.add_ranks()->set_rank(4);
  std::ostringstream os;
  explainPlan(p, os);
  EXPECT_NE(os.str().find("40.0 GiB  32.0 GiB  125% OVER"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("     4  V100-32GB   idle         -  32.0 GiB          -         -"), std::string::npos)
      << os.str();
}

TEST(Explain, AnyPlanCanBeExplained) {
  // Not even valid: explain must not crash on what validatePlan rejects.
  plan::Plan p = makeSamplePlan();
  p.mutable_stages(1)->set_first_layer(40);
  p.mutable_stages(1)->mutable_workers(0)->set_ranks(0, 99);
  for (const plan::Plan &q : {plan::Plan(), p}) {
    std::ostringstream os;
    explainPlan(q, os);
    EXPECT_NE(os.str().find("Prediction"), std::string::npos);
    std::string why, svg = timelineSvg(q);
    EXPECT_TRUE(wellFormedXml(svg, why)) << why << "\n" << svg;
  }
}

TEST(Explain, TimelineHasOneBoxPerInstruction) {
  plan::Plan p = makeSamplePlan();
  std::string svg = timelineSvg(p);
  keep("timeline-2x2-1f1b.svg", svg);
  size_t instructions = 0;
  for (const auto &rank : p.ranks())
    instructions += size_t(rank.program_size());
  EXPECT_EQ(instructions, 4u * 18u);
  EXPECT_EQ(count(svg, "<rect"), instructions);
  std::string why;
  EXPECT_TRUE(wellFormedXml(svg, why)) << why;
  EXPECT_EQ(svg.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg ", 0), 0u);
  EXPECT_NE(svg.find(">time (ms)</text>"), std::string::npos);
  for (const char *legend : {">forward<", ">backward<", ">send / recv (lower lane)<",
                             ">all-reduce (lower lane)<", ">optimizer<"})
    EXPECT_NE(svg.find(legend), std::string::npos) << legend;
  // Micro-batch numbers in the forward/backward boxes: 4 per rank each.
  EXPECT_EQ(count(svg, "text-anchor=\"middle\" stroke=\"none\" fill=\"#ffffff\">3</text>"), 8u);

  // Many ranks: one row per stage (its slowest rank).
  plan::Plan wide = makeSamplePlan(4, 6, 8, true);
  std::string wideSvg = timelineSvg(wide);
  keep("timeline-4x6-gpipe.svg", wideSvg);
  EXPECT_EQ(count(wideSvg, "<rect"), size_t(wide.ranks(0).program_size() + wide.ranks(6).program_size() +
                                            wide.ranks(12).program_size() +
                                            wide.ranks(18).program_size()));
  EXPECT_TRUE(wellFormedXml(wideSvg, why)) << why;
  keep("timeline-4x1-1f1b.svg", timelineSvg(makeSamplePlan(4, 1, 8, false)));

  // Labels stay inside the picture: a right-aligned sublabel ("rank 512
  // V100-SXM2-32GB, slowest of 32" on the 1,024-GPU plan) ends at the label
  // column's edge, which must leave room for it (0.62 em a character).
  plan::Plan named = makeSamplePlan(4, 6, 8, true);
  for (auto &d : *named.mutable_cluster()->mutable_devices())
    d.set_type("V100-SXM2-32GB-WITH-A-LONG-CATALOG-NAME");
  std::string namedSvg = timelineSvg(named);
  size_t at = namedSvg.find("font-size=\"10\" text-anchor=\"end\"");
  ASSERT_NE(at, std::string::npos);
  size_t x = namedSvg.rfind("<text x=\"", at);
  double right = std::stod(namedSvg.substr(x + 9));
  size_t open = namedSvg.find('>', at), close = namedSvg.find("</text>", open);
  std::string label = namedSvg.substr(open + 1, close - open - 1);
  EXPECT_NE(label.find("LONG-CATALOG-NAME"), std::string::npos) << label;
  EXPECT_GE(right - 10 * 0.62 * double(label.size()), 0.0) << label;
}

TEST(Explain, TimelineFileIsValidSvg) {
  std::string folder = ::testing::TempDir();
  std::string path = folder + "hetplan-timeline-" + std::to_string(::getpid()) + ".svg";
  std::string error;
  ASSERT_TRUE(writeTimelineSvg(makeSamplePlan(), path, error)) << error;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), timelineSvg(makeSamplePlan()));
  if (std::system("command -v xmllint > /dev/null 2>&1") == 0) {
    std::string command = "xmllint --noout '" + path + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  std::remove(path.c_str());
  EXPECT_FALSE(writeTimelineSvg(makeSamplePlan(), folder + "no/such/folder/t.svg", error));
  EXPECT_EQ(error, folder + "no/such/folder/t.svg: cannot write: No such file or directory");
}

// explainHtml on the same made-up plans: plan text is escaped, any plan
// renders, the timeline is embedded box for box, prices show where given,
// and the file is written whole or not at all. Real plans and a real
// browser: test/tools/explain-html.test, explain_html_browser.py.
namespace {

/// The ranks the rows of class `cssClass` stand for (their data-ranks).
size_t ranksOf(const std::string &page, const std::string &cssClass) {
  const std::string tag = "<tr class=\"" + cssClass + "\" data-ranks=\"";
  size_t n = 0;
  for (size_t at = page.find(tag); at != std::string::npos; at = page.find(tag, at + 1))
    n += std::stoul(page.substr(at + tag.size()));
  return n;
}

bool has(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

TEST(ExplainHtml, SectionsOfATrainingPlan) {
  plan::Plan p = makeSamplePlan();
  std::string page = explainHtml(p);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>\n<html lang=\"en\">", 0), 0u);
  for (const char *id : {"summary", "cluster", "placement", "memory", "timeline"})
    EXPECT_TRUE(has(page, std::string("<section id=\"") + id + "\">")) << id;
  EXPECT_FALSE(has(page, "<section id=\"serving\">"));
  EXPECT_EQ(ranksOf(page, "device"), size_t(p.cluster().devices_size()));
  EXPECT_EQ(count(page, "<tr class=\"stage\">"), size_t(p.stages_size()));
  EXPECT_EQ(ranksOf(page, "rank"), size_t(p.ranks_size()));
  EXPECT_EQ(count(page, "class=\"membar\""), count(page, "<tr class=\"rank\""));
  // The timeline, embedded whole: its boxes are the page's rects after the
  // timeline section starts.
  std::string svg = timelineSvg(p);
  size_t timeline = page.find("<section id=\"timeline\">");
  EXPECT_EQ(count(page.substr(timeline), "<rect"), count(svg, "<rect"));
  EXPECT_FALSE(has(page, "<?xml"));
  EXPECT_FALSE(has(page, "http://"));
  EXPECT_FALSE(has(page, "https://"));
  EXPECT_FALSE(has(page, "<script"));
  EXPECT_FALSE(has(page, "src="));
  EXPECT_TRUE(has(page, "default-src 'none'"));
}

TEST(ExplainHtml, EscapesPlanText) {
  plan::Plan p = makeSamplePlan();
  const std::string odd = "<img src=x onerror=\"alert('1')\">&amp;";
  p.mutable_model()->set_graph(odd);
  p.mutable_cluster()->mutable_devices(0)->set_type(odd);
  p.mutable_cluster()->set_spec(odd + "\x01");
  p.mutable_model()->mutable_layers(0)->set_name(odd);
  std::string page = explainHtml(p);
  EXPECT_FALSE(has(page, "<img"));  // "src=" stays, as text: "&lt;img src=x"
  EXPECT_FALSE(has(page, "\x01"));
  EXPECT_TRUE(has(page, "&lt;img src=x onerror=&quot;alert(&apos;1&apos;)&quot;&gt;&amp;amp;"));
}

TEST(ExplainHtml, PricesAndOverCapacity) {
  plan::Plan p = makeSamplePlan();
  p.mutable_ranks(3)->mutable_memory()->set_peak(uint64_t(40) << 30);
  HtmlOptions options;
  for (const auto &d : p.cluster().devices())
    options.pricePerHour[d.type()] = 1.25;
  std::string page = explainHtml(p, options);
  EXPECT_TRUE(has(page, "$1.25</td>"));
  EXPECT_TRUE(has(page, "$5.00/h for the cluster")) << page.substr(0, 4000);
  EXPECT_TRUE(has(page, "125.0% OVER"));
  // Without prices: no cost line, a dash per device.
  EXPECT_FALSE(has(explainHtml(p), "/h for the cluster"));
}

TEST(ExplainHtml, AnyPlanRenders) {
  plan::Plan p = makeSamplePlan();
  p.mutable_stages(1)->set_first_layer(40);
  p.mutable_stages(1)->mutable_workers(0)->set_ranks(0, 99);
  p.mutable_ranks(0)->set_stage(77);
  plan::Plan serving;
  serving.mutable_settings()->set_mode("serve");
  serving.mutable_serving()->add_replicas()->add_stages()->add_ranks(5);
  for (const plan::Plan &q : {plan::Plan(), p, serving}) {
    std::string page = explainHtml(q);
    EXPECT_TRUE(has(page, "</html>\n"));
  }
  EXPECT_TRUE(has(explainHtml(serving), "<section id=\"serving\">"));
}

TEST(ExplainHtml, FileIsWrittenWholeOrNotAtAll) {
  std::string folder = ::testing::TempDir();
  std::string path = folder + "hetplan-report-" + std::to_string(::getpid()) + ".html";
  std::string error;
  ASSERT_TRUE(writeExplainHtml(makeSamplePlan(), path, error)) << error;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), explainHtml(makeSamplePlan()));
  std::remove(path.c_str());
  EXPECT_FALSE(writeExplainHtml(makeSamplePlan(), folder + "no/such/folder/r.html", error));
  EXPECT_EQ(error, folder + "no/such/folder/r.html: cannot write: No such file or directory");
}

} // namespace
