#include "actors/zero/issue_queue.hpp"

#include "base/check.hpp"

namespace troupe {

IssueQueue::Ticket IssueQueue::reserve(Issue issue) {
  std::lock_guard lock(mutex_);
  line_.push_back(Place{std::move(issue), false});
  return front_ + line_.size() - 1;
}

void IssueQueue::ready(Ticket ticket) {
  std::lock_guard lock(mutex_);
  TROUPE_CHECK(ticket >= front_ && ticket - front_ < line_.size(), "a ticket is readied once, after reserve");
  line_[ticket - front_].ready = true;
  while (!line_.empty() && line_.front().ready) {
    Issue issue = std::move(line_.front().issue);
    line_.pop_front();
    ++front_;
    issue();
  }
}

std::size_t IssueQueue::waiting() const {
  std::lock_guard lock(mutex_);
  return line_.size();
}

}  // namespace troupe
