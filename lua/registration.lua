-- Every function of the library, registered last (the module tables above are complete by
-- then); the read-only ones flagged no-writes.

redis.register_function('lb_board_put', definitions.lb_board_put)
redis.register_function('lb_board_delete', definitions.lb_board_delete)
redis.register_function('lb_board_purge', definitions.lb_board_purge)
redis.register_function('lb_submit', submit.lb_submit)
redis.register_function('lb_enqueue', queue.lb_enqueue)
redis.register_function('lb_ack', queue.lb_ack)
redis.register_function('lb_lease', publish.lb_lease)
redis.register_function('lb_forget', queue.lb_forget)
redis.register_function('lb_publish', publish.lb_publish)
redis.register_function('lb_close', calendar.lb_close)
redis.register_function('lb_tournament', calendar.lb_tournament)
redis.register_function('lb_join', calendar.lb_join)
redis.register_function { function_name = 'lb_top', callback = reads.lb_top, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_around', callback = reads.lb_around, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_ranks', callback = reads.lb_ranks, flags = { 'no-writes' } }
redis.register_function { function_name = 'lb_status', callback = queue.lb_status, flags = { 'no-writes' } }
redis.register_function('lb_ban', moderation.lb_ban)
redis.register_function('lb_unban', moderation.lb_unban)
redis.register_function('lb_correct', moderation.lb_correct)
redis.register_function('lb_profile', moderation.lb_profile)
redis.register_function('lb_rank_rebuild', reads.lb_rank_rebuild)

