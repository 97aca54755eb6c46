import numpy as np


def select_next_node(current_node, destination_node, unvisited_nodes, distance_matrix):
    """Choose the next city of a TSP tour under construction.

    Args:
        current_node: int, index of the city the tour is at now.
        destination_node: int, index of the city the tour must return to (the start).
        unvisited_nodes: 1-D numpy int array of unvisited cities, sorted from
            nearest to farthest from current_node (at most 50 of them).
        distance_matrix: 2-D numpy float array (read-only) of Euclidean
            distances between all cities.

    Returns:
        int: the next city, one of unvisited_nodes.
    """
    # Baseline: nearest neighbour.
    distances = distance_matrix[current_node][unvisited_nodes]
    return unvisited_nodes[np.argmin(distances)]
