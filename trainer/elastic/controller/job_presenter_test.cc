// What the driver shows of a job, decided without the driver: each decision
// as a table of inputs in the order they arrive and the answer each gets.
#include "trainer/elastic/controller/job_presenter.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace elastic::trainer {
namespace {

using std::chrono::milliseconds;

JobPresenter::Time At(int64_t ms) { return JobPresenter::Time() + milliseconds(ms); }

// One view as it arrives, and whether it is announced.
struct ViewCase {
  uint64_t generation;
  bool job_over;
  bool announced;
};

void ExpectViews(JobPresenter& presenter, const std::vector<ViewCase>& cases) {
  for (size_t i = 0; i < cases.size(); ++i) {
    const ViewCase& c = cases[i];
    EXPECT_EQ(presenter.AnnouncesView(c.generation, 2, c.job_over, At(0)), c.announced)
        << "view " << i << ": generation " << c.generation;
  }
}

TEST(JobPresenterTest, AnnouncesOnlyViewsNewerThanAnyAnnounced) {
  JobPresenter presenter;
  ExpectViews(presenter, {
                             {1, false, true},
                             {1, false, false},  // the head's copy of the driver's publication
                             {3, false, true},
                             {2, false, false},  // an old view arriving after a newer one
                             {3, false, false},
                             {4, false, true},
                         });
}

TEST(JobPresenterTest, AnnouncesNoViewOnceTheJobIsOver) {
  JobPresenter presenter;
  // A view refused while the job is over is not remembered as announced.
  ExpectViews(presenter, {{1, false, true}, {2, true, false}, {2, false, true}});
}

TEST(JobPresenterTest, ATakenOverJobStartsFromItsJournal) {
  JobPresenter presenter = JobPresenter::TakenOver(/*journal_generation=*/7, /*printed_epoch=*/4);
  EXPECT_EQ(presenter.printed_epoch(), 4);
  // The restarted head's empty view (the journal's generation + 1) is not announced.
  ExpectViews(presenter, {{7, false, false}, {8, false, false}, {9, false, true}});
  // The old controller printed epoch 4's summary already.
  EXPECT_FALSE(presenter.EpochSummaryStands(4));
  EXPECT_TRUE(presenter.EpochSummaryStands(5));
  EXPECT_EQ(presenter.printed_epoch(), 5);
}

TEST(JobPresenterTest, ANewJobStartsWithNothingShown) {
  JobPresenter presenter;
  EXPECT_EQ(presenter.printed_epoch(), 0);
  EXPECT_FALSE(presenter.FirstStep(0, 0, 0, At(0)).has_value());
  EXPECT_FALSE(presenter.CountsMembershipChanges(false));
  EXPECT_TRUE(presenter.EpochSummaryStands(1));
}

TEST(JobPresenterTest, EpochSummaries) {
  struct Case {
    int64_t epoch;
    bool stands;
    int64_t printed_epoch;
  };
  const std::vector<Case> cases = {
      {1, true, 1},  {2, true, 2},
      {2, false, 2},  // a redone epoch reported twice: the first one stands
      {1, false, 2}, {4, true, 4},
      {3, false, 4},
  };
  JobPresenter presenter;
  for (const Case& c : cases) {
    EXPECT_EQ(presenter.EpochSummaryStands(c.epoch), c.stands) << "epoch " << c.epoch;
    EXPECT_EQ(presenter.printed_epoch(), c.printed_epoch) << "epoch " << c.epoch;
  }
}

TEST(JobPresenterTest, Evaluations) {
  struct Case {
    int64_t step;
    bool stands;
  };
  const std::vector<Case> cases = {
      {100, true},  {200, true}, {200, false},  // steps redone after a failure evaluate again
      {150, false}, {300, true},
  };
  JobPresenter presenter;
  for (const Case& c : cases)
    EXPECT_EQ(presenter.EvaluationStands(c.step), c.stands) << "step " << c.step;
  // Evaluations and epoch summaries are counted apart.
  EXPECT_EQ(presenter.printed_epoch(), 0);
}

TEST(JobPresenterTest, ProgressLine) {
  struct Case {
    int64_t epoch;
    uint64_t generation;
    bool starts_over;
  };
  const std::vector<Case> cases = {
      {0, 1, true},                 // the first progress
      {0, 1, false}, {1, 1, true},  // a new epoch
      {1, 2, true},                 // a new generation redoes part of the epoch with another world
      {1, 2, false}, {0, 3, true},  // a generation restoring an older epoch
      {0, 0, true},
  };
  JobPresenter presenter;
  for (const Case& c : cases)
    EXPECT_EQ(presenter.StartsProgressLine(c.epoch, c.generation), c.starts_over)
        << "epoch " << c.epoch << " generation " << c.generation;
}

TEST(JobPresenterTest, FirstStepOfTheNewestAnnouncedView) {
  JobPresenter presenter;
  presenter.GenerationStarting("join");
  ASSERT_TRUE(presenter.AnnouncesView(3, 4, false, At(1000)));
  // A step of an older generation is no first step of this one.
  EXPECT_FALSE(presenter.FirstStep(2, 100.0, 100.0, At(1500)).has_value());
  // Announced at steady 1 s, which is wall 100.0 - (2.5 - 1) = 98.5; the
  // workers' first step at wall 101.0.
  const std::optional<Rescale> rescale = presenter.FirstStep(3, 101.0, 100.0, At(2500));
  ASSERT_TRUE(rescale.has_value());
  EXPECT_EQ(rescale->generation, 3u);
  EXPECT_EQ(rescale->world, 4u);
  EXPECT_EQ(rescale->reason, "join");
  EXPECT_DOUBLE_EQ(rescale->seconds_after_view, 2.5);
  // Reported once.
  EXPECT_FALSE(presenter.FirstStep(3, 102.0, 101.0, At(3500)).has_value());
  // An older view arriving later does not wait for a first step of its own.
  EXPECT_FALSE(presenter.AnnouncesView(2, 5, false, At(4000)));
  EXPECT_FALSE(presenter.FirstStep(2, 103.0, 102.0, At(4500)).has_value());
  // The next view does, with the reason of the generation started since.
  presenter.GenerationStarting("failure");
  ASSERT_TRUE(presenter.AnnouncesView(4, 3, false, At(5000)));
  const std::optional<Rescale> next = presenter.FirstStep(4, 105.0, 105.0, At(5000));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->world, 3u);
  EXPECT_EQ(next->reason, "failure");
  EXPECT_DOUBLE_EQ(next->seconds_after_view, 0.0);
}

TEST(JobPresenterTest, SaidOnceAMember) {
  struct Case {
    uint64_t member;
    bool said;
  };
  // The head repeats a draining member in every later update; a worker sends
  // its statistics every few seconds.
  const std::vector<Case> cases = {{1, true}, {1, false}, {2, true}, {1, false}, {2, false}};
  JobPresenter draining;
  for (const Case& c : cases)
    EXPECT_EQ(draining.LogsDraining(c.member), c.said) << "draining " << c.member;
  JobPresenter stats;
  for (const Case& c : cases)
    EXPECT_EQ(stats.WarnsOfBadStats(c.member), c.said) << "stats " << c.member;
  // Each is said once of its own: a draining member's bad statistics still warn.
  EXPECT_TRUE(draining.WarnsOfBadStats(1));
}

TEST(JobPresenterTest, MembershipChangesCountOnceAViewIsAnnouncedOrTheJobStarted) {
  struct Case {
    bool view_announced;
    bool job_started;
    bool counts;
  };
  const std::vector<Case> cases = {
      {false, false, false},  // the joins that form the first view
      {false, true, true},
      {true, false, true},
      {true, true, true},
  };
  for (const Case& c : cases) {
    JobPresenter presenter;
    if (c.view_announced) {
      ASSERT_TRUE(presenter.AnnouncesView(1, 2, false, At(0)));
    }
    EXPECT_EQ(presenter.CountsMembershipChanges(c.job_started), c.counts)
        << "view announced " << c.view_announced << " job started " << c.job_started;
  }
  // A taken-over job's restarted head's empty view is not announced: until
  // one is, only the job having started counts.
  const JobPresenter taken_over = JobPresenter::TakenOver(7, 4);
  EXPECT_FALSE(taken_over.CountsMembershipChanges(false));
  EXPECT_TRUE(taken_over.CountsMembershipChanges(true));
}

}  // namespace
TEST(JobPresenterTest, AFailingJournalIsSaidOnceAnErrorAndAgainAfterAWriteWorked) {
  struct Case {
    std::string error;  // empty: the write worked
    bool said;
  };
  const std::vector<Case> cases = {
      {"disk full", true},  {"disk full", false},
      {"disk full", false}, {"read-only", true},  // another error is news
      {"", false},          {"disk full", true},  // failing again after a write worked
  };
  JobPresenter presenter;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (c.error.empty()) {
      presenter.JournalWritten();
      continue;
    }
    EXPECT_EQ(presenter.WarnsOfJournalFailure(c.error), c.said) << "write " << i;
  }
}

TEST(JobPresenterTest, AFailingCopyIsSaidOnceARunAndItsRecoveryOnce) {
  struct Case {
    bool written;
    bool said;  // the warning for a failure, "written again" for a success
  };
  const std::vector<Case> cases = {
      {true, false},  // written, never failed: nothing to say
      {false, true}, {false, false}, {false, false}, {true, true},  // written again
      {true, false}, {false, true},
  };
  JobPresenter presenter;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const bool said = c.written ? presenter.SaysCopyWrittenAgain() : presenter.WarnsOfCopyFailure();
    EXPECT_EQ(said, c.said) << "write " << i;
  }
}

}  // namespace elastic::trainer
