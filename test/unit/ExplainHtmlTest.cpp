//===- ExplainHtmlTest.cpp - the plan report as an HTML page --------------===//
//
// explainHtml on made-up plans (PlanFileTest.cpp's makeSamplePlan): plan text
// is escaped, any plan renders, the timeline is embedded box for box, prices
// show where given, and the file is written whole or not at all. Real plans
// and a real browser: test/tools/explain-html.test, explain_html_browser.py.
//
//===----------------------------------------------------------------------===//

#include "hetplan/runtime/Explain.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

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
  EXPECT_TRUE(has(page, "&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;amp;"));
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
